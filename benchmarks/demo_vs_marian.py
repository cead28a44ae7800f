"""The demo recipe trained twice per seed in one run: AAYN, then transformers' MarianMTModel of the same shape.

    python benchmarks/demo_vs_marian.py [recipes/demo.yaml] [--seeds 1,2,3] [--key value ...]

Same recipe, data, tokenizer, seed, steps and Trainer; only the model class differs (MarianMTModel configured by
`aayn.marian.marian_config_for`: same widths, layers, heads, vocabulary, sinusoidal positions, post-norm, scaled
and tied embeddings, N(0, init_std) weights). Each model decodes the test split its own way with the recipe's
beams and length penalty (AAYN: the paper's beam search, GNMT's penalty; Marian: transformers' beam search).
One seed cannot separate two models that learn equally fast, so `--seeds` trains both arms once per seed
(alternating) and prints every run and the mean. Prints test BLEU / chrF / loss and wall time of each.
"""

import json
import statistics
import sys
import time

from transformers import MarianMTModel

from aayn.cli import setup_logging
from aayn.marian import marian_config_for
from aayn.training.arguments import parse_arguments
from aayn.training.run import build_model, run


def marian(model_args, tokenizer):
    config = marian_config_for(build_model(model_args, tokenizer).config)
    config._attn_implementation = model_args.attn_implementation
    return MarianMTModel(config)


def split_seeds(argv: list[str]) -> tuple[list[str], list[int] | None]:
    if "--seeds" not in argv:
        return argv, None
    i = argv.index("--seeds")
    try:
        seeds = [int(s) for s in argv[i + 1].split(",")]
    except (IndexError, ValueError):
        raise SystemExit("--seeds takes a comma-separated list of integers, e.g. --seeds 1,2,3") from None
    return argv[:i] + argv[i + 2 :], seeds


def main():
    setup_logging()
    argv, seeds = split_seeds(sys.argv[1:])
    if not argv or argv[0].startswith("--"):  # no recipe given: the demo's
        argv = ["recipes/demo.yaml", *argv]
    rows = []
    for seed in seeds or [None]:
        for name, builder in (("aayn", build_model), ("marian", marian)):
            extra = [] if seed is None else ["--seed", str(seed)]
            out = f"runs/demo-vs-marian/{name}" + ("" if seed is None else f"-seed{seed}")
            model_args, data_args, args = parse_arguments([*argv, *extra, "--output_dir", out])
            start = time.perf_counter()
            metrics = run(model_args, data_args, args, model_builder=builder)
            rows.append({"model": name, "seed": args.seed, "bleu": metrics["test_bleu"], "chrf": metrics["test_chrf"],
                         "loss": metrics["test_loss"], "minutes": (time.perf_counter() - start) / 60})
            print(json.dumps(rows[-1]), flush=True)
    print("| model | seed | test BLEU | test chrF | test loss | wall time |\n| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['model']} | {row['seed']} | {row['bleu']:.2f} | {row['chrf']:.2f} | {row['loss']:.3f} "
              f"| {row['minutes']:.1f} min |")
    if len(rows) > 2:
        for name in ("aayn", "marian"):
            mine = [r for r in rows if r["model"] == name]
            mean = {k: statistics.mean(r[k] for r in mine) for k in ("bleu", "chrf", "loss", "minutes")}
            print(f"| {name} | mean of {len(mine)} | {mean['bleu']:.2f} | {mean['chrf']:.2f} | {mean['loss']:.3f} "
                  f"| {mean['minutes']:.1f} min |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
