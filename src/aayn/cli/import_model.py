"""`aayn import FORMAT CHECKPOINT`: a model trained elsewhere brought in as an aayn folder."""

from __future__ import annotations

import argparse

from .arguments import format_arguments, format_options


def import_model(args: argparse.Namespace) -> None:
    """Bring a model trained elsewhere in as an aayn folder (fairseq's Transformer)."""
    from ..formats import FORMATS

    entry = FORMATS[args.format]
    output = entry.write(args.checkpoint, args.output_dir, **format_options(args, entry, "import"))
    print(f"{args.format} model imported into {output}")


def import_arguments(parser: argparse.ArgumentParser) -> None:
    from ..formats import FORMATS, imports

    parser.add_argument("format", choices=imports())
    parser.add_argument("checkpoint", help="; ".join(f"{name}: {FORMATS[name].source_help}" for name in imports()))
    format_arguments(parser, "import")


TRANSFORMERS = "quiet"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = import_model, import_arguments
