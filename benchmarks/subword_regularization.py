"""Subword regularization against none: the same recipe trained without and with it, the arms alternating seed by
seed on this machine: `bpe_dropout` 0 and 0.1 (the byte-level BPE), or with `--sentencepiece` a SentencePiece
unigram model and `sentencepiece_alpha` 0 and 0.1 (every segmentation); each run's training throughput (examples/s,
steps/s: the resampling is done in the training process) and, unless `--throughput_only`, its test BLEU and chrF.

    python benchmarks/subword_regularization.py [--recipe recipes/demo.yaml] [--sentencepiece] [--seeds 1 2 3]
        [--max_steps N] [--lang_pairs en-pt:2000] [--throughput_only] [--out runs/bench-subwords]

`--lang_pairs en-pt:2000` with recipes/multilingual-bible.yaml is the 2,000-verse pair alone. Run it alone on the
machine (CPU-heavy trainings, one after the other).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = (0.0, 0.1)


def train(recipe: Path, p: float, seed: int, args) -> dict:
    folder = args.out / f"p{p:g}-seed{seed}"
    key = ["--tokenizer_type", "sentencepiece", "--sentencepiece_alpha"] if args.sentencepiece else ["--bpe_dropout"]
    command = [sys.executable, "-m", "aayn.train", str(recipe), "--output_dir", str(folder), "--seed", str(seed),
               *key, str(p), "--overwrite_output_dir", "true", "--report_to", "none"]  # fmt: skip
    if args.max_steps:
        command += ["--max_steps", str(args.max_steps)]
    if args.lang_pairs:
        command += ["--lang_pairs", args.lang_pairs]
    if args.throughput_only:
        command += ["--eval_strategy", "no", "--save_strategy", "no", "--do_predict", "false",
                    "--average_last_checkpoints", "0", "--load_best_model_at_end", "false"]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True)
    row = {"regularization": p, "seed": seed, "seconds": round(time.perf_counter() - started)}
    row.update(json.loads((folder / "train_results.json").read_text()))
    if not args.throughput_only:
        row.update(json.loads((folder / "test_results.json").read_text()))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "demo.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--max_steps", type=int, default=None)
    parser.add_argument("--lang_pairs", default=None)
    parser.add_argument("--sentencepiece", action="store_true", help="SentencePiece unigram sampling, not BPE-dropout")
    parser.add_argument("--throughput_only", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-subwords"))
    args = parser.parse_args()
    rows = [train(args.recipe, p, seed, args) for seed in args.seeds for p in ARMS]
    arm = "sentencepiece_alpha" if args.sentencepiece else "bpe_dropout"
    print(f"| {arm} | seed | test BLEU | test chrF | train examples/s | train steps/s | run s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        bleu, chrf = row.get("test_bleu", row.get("test_bleu_en-pt")), row.get("test_chrf", row.get("test_chrf_en-pt"))
        print(
            f"| {row['regularization']:g} | {row['seed']} | {'-' if bleu is None else f'{bleu:.2f}'} | "
            f"{'-' if chrf is None else f'{chrf:.2f}'} | {row['train_samples_per_second']:.1f} | "
            f"{row['train_steps_per_second']:.2f} | {row['seconds']} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
