"""The `aayn` command."""

import argparse
import logging
import sys
import time


def copy_task(args: argparse.Namespace) -> None:
    """Train a tiny AAYN on the copy task, check it by greedy decoding, save it and load it back."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from .copy_task import copy_batch, copy_exact_match, train_copy_task

    start = time.perf_counter()
    model = train_copy_task(steps=args.steps, seed=args.seed)
    print(f"trained {args.steps} steps in {time.perf_counter() - start:.1f}s")
    print(f"exact match of greedy copies on 200 fresh sequences: {copy_exact_match(model):.1%}")
    model.save_pretrained(args.output_dir)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(args.output_dir)
    examples = copy_batch(3, 10, model.config.vocab_size, torch.Generator().manual_seed(args.seed + 1))
    for source, output in zip(examples, loaded.generate(examples, max_new_tokens=11, do_sample=False)):
        print(f"  {source[:-1].tolist()} -> {output[1:-1].tolist()}")
    print(f"saved to {args.output_dir} (weights, config with auto_map, code); reloaded with AutoModelForSeq2SeqLM")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aayn", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("copy-task", help=copy_task.__doc__)
    demo.add_argument("--output_dir", default="runs/copy-task", help="where to save the trained model")
    demo.add_argument("--steps", type=int, default=400, help="training steps (default: 400)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=copy_task)
    args = parser.parse_args(argv)
    if args.command == "copy-task" and args.steps <= 0:
        parser.error(f"--steps must be a positive integer, got {args.steps}")
    # progress of aayn's own work; transformers keeps its default (warnings)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logging.getLogger("aayn").addHandler(handler)
    logging.getLogger("aayn").setLevel(logging.INFO)
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
