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


def train(args: argparse.Namespace) -> None:
    """Train a translation model from a YAML recipe (see recipes/); flags after the recipe override it."""
    from .training.arguments import parse_arguments
    from .training.run import run

    run(*parse_arguments(args.recipe_and_flags))


def average(args: argparse.Namespace) -> None:
    """Average the weights of checkpoints into a complete, hub-ready model folder (§6.1)."""
    from .training.average import average_checkpoints

    print(f"wrote {average_checkpoints(args.checkpoints, args.output_dir)}")


def evaluate(args: argparse.Namespace) -> None:
    """Print BLEU, chrF (sacreBLEU) and their signatures for a saved model on a dataset split, as JSON."""
    import json

    from .training.evaluation import evaluate_model

    generate = {k: v for k, v in (("num_beams", args.num_beams), ("max_new_tokens", args.max_new_tokens)) if v is not None}
    scores = evaluate_model(
        args.model,
        args.dataset_name,
        dataset_config_name=args.dataset_config_name,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        split=args.split,
        max_samples=args.max_samples,
        batch_size=args.batch_size,
        device=args.device,
        **generate,
    )
    print(json.dumps(scores, indent=2))


def setup_logging() -> None:
    """Progress of aayn's own work at INFO; transformers keeps its default (warnings)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger = logging.getLogger("aayn")
    if not logger.handlers:
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aayn", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("copy-task", help=copy_task.__doc__)
    demo.add_argument("--output_dir", default="runs/copy-task", help="where to save the trained model")
    demo.add_argument("--steps", type=int, default=400, help="training steps (default: 400)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=copy_task)
    trainer = commands.add_parser("train", help=train.__doc__, add_help=False)
    trainer.add_argument("recipe_and_flags", nargs=argparse.REMAINDER, help="RECIPE.yaml [--key value ...]")
    trainer.set_defaults(run=train)
    averager = commands.add_parser("average", help=average.__doc__)
    averager.add_argument("--output_dir", required=True, help="new folder for the averaged model")
    averager.add_argument("checkpoints", nargs="+", help="checkpoint folders (model.safetensors + config.json)")
    averager.set_defaults(run=average)
    scorer = commands.add_parser("evaluate", help=evaluate.__doc__)
    scorer.add_argument("--model", required=True, help="saved model folder or Hub id")
    scorer.add_argument("--dataset_name", required=True, help='Hub id, local folder, or "bible"')
    scorer.add_argument("--dataset_config_name")
    scorer.add_argument("--source_lang", required=True)
    scorer.add_argument("--target_lang", required=True)
    scorer.add_argument("--split", default="test", help="split expression, slicing allowed (default: test)")
    scorer.add_argument("--max_samples", type=positive_int)
    scorer.add_argument("--num_beams", type=positive_int, help="default: the model's generation config")
    scorer.add_argument("--max_new_tokens", type=positive_int)
    scorer.add_argument("--batch_size", type=positive_int, default=32)
    scorer.add_argument("--device", default="cpu")
    scorer.set_defaults(run=evaluate)
    args = parser.parse_args(argv)
    if args.command == "copy-task" and args.steps <= 0:
        parser.error(f"--steps must be a positive integer, got {args.steps}")
    setup_logging()
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
