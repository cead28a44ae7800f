"""`aayn bench`: aayn against MarianMTModel at the paper's base shapes."""

from __future__ import annotations

import argparse
import os


def bench(args: argparse.Namespace) -> None:
    """Measure AAYN against MarianMTModel at the paper's base shapes (train, greedy, beam rows; MFU)."""
    from ..bench import print_table, run_bench, write_json
    from ..bench.demo import demo_run_model
    from ..checks import check_device

    check_device(args.device)
    decoding_model = args.decoding_model or demo_run_model()
    report = run_bench(
        quick=args.quick, device=args.device, dtype=args.dtype, wmt=args.wmt, decoding_model=decoding_model
    )
    if args.json:  # first: a long run's numbers survive whatever happens while printing them
        write_json(report, args.json)
    print_table(report)


def bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="fewer repeats and smaller batches (~3 min on 2 cores)")
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--wmt",
        default=os.environ.get("AAYN_WMT14_MINI"),
        help="a folder laid out like the Hub's wmt/wmt14 (de-en test split) for newstest2014 sentence "
        "lengths; default: $AAYN_WMT14_MINI, else a built-in sample of them",
    )
    parser.add_argument(
        "--decoding_model",
        help="a saved English -> X aayn model for the default-decoding rows; default: the demo job's "
        "(recipes/demo.yaml's output_dir) if it is there, else a model trained in the bench for a few "
        "hundred steps",
    )


TRANSFORMERS = "bars"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = bench, bench_arguments
