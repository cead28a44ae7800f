"""`aayn average`: checkpoints' weights averaged into a model folder (§6.1)."""

from __future__ import annotations

import argparse


def average(args: argparse.Namespace) -> None:
    """Average the weights of checkpoints into a complete, hub-ready model folder (§6.1)."""
    from ..training.average import average_checkpoints

    print(f"wrote {average_checkpoints(args.checkpoints, args.output_dir)}")


def average_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output_dir", required=True, help="new folder for the averaged model")
    parser.add_argument("checkpoints", nargs="+", help="checkpoint folders (model.safetensors + config.json)")


TRANSFORMERS = "bars"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = average, average_arguments
