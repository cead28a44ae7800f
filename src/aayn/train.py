"""`python -m aayn.train RECIPE.yaml [--key value ...]`, the module form of `aayn train` (for `torchrun -m` and
`accelerate launch -m`)."""

import sys


def main(argv: list[str] | None = None) -> int:
    from .cli import main as aayn

    return aayn(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
