"""`python -m aayn.train RECIPE.yaml [--key value ...]`, the module form of `aayn train` (for `accelerate launch -m`)."""

import sys

from .training.arguments import parse_arguments
from .training.run import run


def main(argv: list[str] | None = None) -> int:
    from .cli import setup_logging

    setup_logging()
    run(*parse_arguments(sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
