"""`aayn export --format FORMAT`: a saved model in another engine's format (`aayn.formats`' registry)."""

from __future__ import annotations

import argparse

from .arguments import format_arguments, format_options


def export(args: argparse.Namespace) -> None:
    """Convert a saved model for another inference engine (CTranslate2, ONNX Runtime, Argos Translate)."""
    from ..formats import FORMATS

    entry = FORMATS[args.format]
    other = "--output" if entry.output_option == "--output_dir" else "--output_dir"
    output = getattr(args, entry.output_option[2:], None)
    if not output or getattr(args, other[2:], None):
        wanted = f"{entry.output_option} {entry.output_metavar}"
        raise ValueError(f"--format {args.format} writes {wanted} (and not the other)")
    output = entry.write(args.model, output, **format_options(args, entry, "export"))
    print(f"{args.format} model written to {output}")


def export_arguments(parser: argparse.ArgumentParser) -> None:
    from ..formats import exports

    parser.add_argument("--format", required=True, choices=exports())
    parser.add_argument("--model", required=True, help="saved model folder (weights, config, tokenizer)")
    format_arguments(parser, "export")


TRANSFORMERS = "quiet"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = export, export_arguments
