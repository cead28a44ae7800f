"""`aayn copy-task`: the smoke test, a tiny model taught to copy."""

from __future__ import annotations

import argparse
import time

from .arguments import positive_int


def copy_task(args: argparse.Namespace) -> None:
    """Train a tiny AAYN on the copy task, check it by greedy decoding, save it and load it back."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from ..training.copy_task import copy_batch, copy_exact_match, train_copy_task

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


def copy_task_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output_dir", default="runs/copy-task", help="where to save the trained model")
    parser.add_argument("--steps", type=positive_int, default=400, help="training steps (default: 400)")
    parser.add_argument("--seed", type=int, default=0)


TRANSFORMERS = "bars"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = copy_task, copy_task_arguments
