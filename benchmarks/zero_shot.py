"""A zero-shot direction of the embedded Bible: one model trained on en<->es and en<->fr (the shapes and steps of
recipes/multilingual-bible.yaml, those four pairs), then es->fr, which it never saw, translated directly (one
warning line names it zero-shot) and through English (`--pivot en`: es->en, then en->fr); each scored by `aayn
evaluate` on the first `--max_samples` test verses (BLEU, chrF, and the off-target rate: outputs Lingua does not
find in French), beside the trained pairs' own test scores.

    python benchmarks/zero_shot.py [--max_steps 4000] [--max_samples 300] [--out runs/bench-zero-shot]

Run it alone on the machine (a CPU-heavy training, then the evaluations).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "multilingual-bible.yaml"
PAIRS = "en-es,es-en,en-fr,fr-en"


def evaluate(folder: Path, samples: int, *extra: str) -> dict:
    command = [sys.executable, "-m", "aayn.cli", "evaluate", "--model", str(folder), "--dataset_name", "bible",
               "--source_lang", "es", "--target_lang", "fr", "--max_samples", str(samples), *extra]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    return {**json.loads(result.stdout), "seconds": round(time.perf_counter() - started), "said": result.stderr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max_steps", type=int, default=4000)
    parser.add_argument("--max_samples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-zero-shot"))
    args = parser.parse_args()
    folder = args.out / "model"
    command = [sys.executable, "-m", "aayn.train", str(RECIPE), "--lang_pairs", PAIRS, "--output_dir", str(folder),
               "--max_steps", str(args.max_steps), "--seed", str(args.seed),
               "--overwrite_output_dir", "true"]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True)
    trained = round(time.perf_counter() - started)
    results = json.loads((folder / "test_results.json").read_text())
    direct = evaluate(folder, args.max_samples)
    pivoted = evaluate(folder, args.max_samples, "--pivot", "en")
    print(f"trained {PAIRS} for {args.max_steps} steps in {trained} s; es-fr direct said: {direct['said'].strip()!r}")
    print("| direction | test BLEU | test chrF | off target | seconds |")
    print("|---|---|---|---|---|")
    for pair in PAIRS.split(","):
        off = results.get(f"test_off_target_{pair}")
        print(f"| {pair} (trained) | {results[f'test_bleu_{pair}']:.2f} | {results[f'test_chrf_{pair}']:.2f} | "
              f"{'-' if off is None else f'{off:.1%}'} | - |")  # fmt: skip
    for name, scores in (("es-fr zero-shot", direct), ("es-fr through en", pivoted)):
        off = scores.get("off_target")
        print(f"| {name} | {scores['bleu']:.2f} | {scores['chrf']:.2f} | {'-' if off is None else f'{off:.1%}'} | "
              f"{scores['seconds']} |")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"trained_seconds": trained, "pairs": results, "direct": direct, "pivot": pivoted}
    (args.out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
