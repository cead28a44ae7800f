"""The `aayn` command: one module per subcommand (its arguments, its checks, its handler: `arguments`, `run`), and
`COMMANDS`, the table the parser is built from. Adding a subcommand is a module here and a line of the table.
Nothing heavy is imported before a command's arguments are known to be good."""

from __future__ import annotations

import argparse
import importlib
import sys

from ..registration import register_later
from .arguments import prepare_transformers, report_user_errors, setup_logging

# `aayn NAME`: the module holding it (`run`, `arguments`, and `TRANSFORMERS`: when transformers is set up for it:
# "quiet": before it runs, without model loading's progress bars unless --verbose; "bars": before it runs, with them;
# "itself": the handler does it, once it knows it needs it: a recipe parsed, a folder not CTranslate2's)
COMMANDS = {
    "copy-task": "copy_task",
    "train": "train",
    "preprocess": "preprocess",
    "clean": "clean",
    "mix": "mix",
    "distill": "distill",
    "pipeline": "pipeline",
    "average": "average",
    "evaluate": "evaluate",
    "translate": "translate",
    "serve": "serve",
    "score": "score",
    "bench": "bench",
    "export": "export",
    "import": "import_model",
}
RECIPE_COMMANDS = ("train", "preprocess")  # all after them is the recipe parser's: no argparse of their own


def command(name: str):
    """The module of `aayn NAME`."""
    return importlib.import_module(f"{__name__}.{COMMANDS[name]}")


def command_line_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The aayn command's parser; only `chosen`'s subparser gets its arguments (each command's own, such as the
    server's defaults, cost nothing to the others: the top-level help lists the commands alone)."""
    epilog = "--debug anywhere: tracebacks for errors; --verbose: model loading's progress bars"
    parser = argparse.ArgumentParser(prog="aayn", description=__doc__.split(":")[0] + ".", epilog=epilog)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        entry = command(name)
        sub = commands.add_parser(name, help=entry.run.__doc__, add_help=name not in RECIPE_COMMANDS)
        if name == chosen:
            entry.arguments(sub)
        sub.set_defaults(run=entry.run)
    return parser


def parsed(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments, with `aayn serve`'s verb words wherever they stand among its flags (`keys --api_keys_db_path F
    add 100`, as ltmanage takes them; argparse takes a list of positionals only in one run)."""
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "verb", None) and not any(word.startswith("-") for word in extra):
        args.verb += extra
        return args
    return parser.parse_args(argv) if extra else args


def main(argv: list[str] | None = None) -> int:
    register_later()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug, verbose = "--debug" in argv, "--verbose" in argv
    argv = [arg for arg in argv if arg not in ("--debug", "--verbose")]
    if argv[:1] and argv[0] in RECIPE_COMMANDS:
        args = argparse.Namespace(command=argv[0], recipe_and_flags=argv[1:], run=command(argv[0]).run)
    else:
        args = parsed(command_line_parser(argv[0] if argv else None), argv)
    setup_logging()
    args.verbose = verbose
    setup = command(args.command).TRANSFORMERS
    if setup != "itself":
        prepare_transformers(progress_bars=verbose or setup == "bars")
    return report_user_errors(args.command, lambda: args.run(args), debug)
