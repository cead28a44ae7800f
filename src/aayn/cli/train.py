"""`aayn train RECIPE.yaml [--key value ...]`: a translation model trained from a recipe."""

from __future__ import annotations

import argparse

from ..registration import register
from .arguments import recipe_arguments


def train(args: argparse.Namespace) -> None:
    """Train a translation model from a YAML recipe (see recipes/); flags after the recipe override it."""
    from ..training.arguments import parse_arguments

    arguments = parse_arguments(args.recipe_and_flags)  # `aayn train --help` lists every key
    register()
    from ..training.job import run  # datasets, evaluate, ...: only once the arguments are known to be good

    run(*arguments)


TRANSFORMERS = "itself"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = train, recipe_arguments
