"""The demo recipe trained twice in one run: AAYN, then transformers' MarianMTModel of the same shape.

    python benchmarks/demo_vs_marian.py [recipes/demo.yaml] [--key value ...]

Same recipe, data, tokenizer, seed, steps and Trainer; only the model class differs (MarianMTModel configured by
`aayn.marian.marian_config_for`: same widths, layers, heads, vocabulary, sinusoidal positions, post-norm, scaled
and tied embeddings). Prints test BLEU / chrF and wall time of each.
"""

import json
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


def main():
    setup_logging()
    argv = sys.argv[1:] or ["recipes/demo.yaml"]
    rows = []
    for name, builder in (("aayn", build_model), ("marian", marian)):
        model_args, data_args, args = parse_arguments([*argv, "--output_dir", f"runs/demo-vs-marian/{name}"])
        start = time.perf_counter()
        metrics = run(model_args, data_args, args, model_builder=builder)
        rows.append({"model": name, "bleu": metrics["test_bleu"], "chrf": metrics["test_chrf"],
                     "minutes": (time.perf_counter() - start) / 60})
    print("| model | test BLEU | test chrF | wall time |\n| --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['model']} | {row['bleu']:.2f} | {row['chrf']:.2f} | {row['minutes']:.1f} min |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
