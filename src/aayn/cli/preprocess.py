"""`aayn preprocess RECIPE.yaml`: a recipe's data prepared once, as fairseq-preprocess does."""

from __future__ import annotations

import argparse

from ..registration import register
from .arguments import recipe_arguments


def preprocess(args: argparse.Namespace) -> None:
    """Prepare a recipe's data once, as fairseq-preprocess does: the BPE and every split's token ids, in a folder
    under datasets' cache that `aayn train` with the same data and settings finds by itself (same keys as train)."""
    from ..training.arguments import parse_arguments

    arguments = parse_arguments(args.recipe_and_flags)
    register()
    from ..training.job import prepare
    from ..training.plan import plan_run

    prepared = prepare(plan_run(*arguments))
    size = sum(path.stat().st_size for path in prepared.folder.rglob("*") if path.is_file())
    splits = ", ".join(f"{split} {len(rows):,} pairs" for split, rows in prepared.splits.items())
    print(f"prepared {splits} ({size / 1e6:,.1f} MB) in {prepared.folder}")


TRANSFORMERS = "itself"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = preprocess, recipe_arguments
