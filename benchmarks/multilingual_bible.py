"""A small pair beside related large ones: en->pt cut to 2,000 training verses of the embedded Bible, trained
alone (a bilingual model) and inside one model with en->es, en->fr and en->it in full (recipes/multilingual-bible.yaml),
same shapes, same steps, one after the other on this machine; the test BLEU and chrF of en->pt (and of the other
pairs) from each run's test_results.json, with each run's training time.

`--sharing` adds the price of sharing: each large pair trained alone for the steps it had inside the multilingual
model, its share p_i = size_i^(1/T) / sum_j size_j^(1/T) of the steps (fairseq's temperature sampling, written out
here from the training verses the Bible gives each pair), so that each large pair's bilingual model and the
multilingual model saw the same number of that pair's batches.

    python benchmarks/multilingual_bible.py [--max_steps N] [--out runs/bench-multilingual] [--seed 1] [--sharing]
        [--arms bilingual-en-pt multilingual en-es en-fr en-it]

`--max_steps` defaults to the recipe's. Run it alone on the machine (CPU-heavy trainings, one after the other).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "multilingual-bible.yaml"
SMALL = "en-pt:2000"
LARGE = ("en-es", "en-fr", "en-it")


def recipe() -> dict:
    return yaml.safe_load(RECIPE.read_text())


def shares(temperature: float) -> dict[str, float]:
    """Each pair's share of the multilingual recipe's examples: size_i^(1/T), normalized, from the training verses
    the Bible gives each pair (en-pt cut to its first 2,000)."""
    from aayn.data.bible import bible_splits

    sizes = {pair: len(bible_splits(*pair.split("-"))["train"]) for pair in LARGE}
    sizes["en-pt"] = min(2000, len(bible_splits("en", "pt")["train"]))
    weights = {pair: size ** (1.0 / temperature) for pair, size in sizes.items()}
    return {pair: weight / sum(weights.values()) for pair, weight in weights.items()}


def train(name: str, pairs: str | None, out: Path, max_steps: int, seed: int) -> dict:
    folder = out / name
    command = [sys.executable, "-m", "aayn.train", str(RECIPE), "--output_dir", str(folder), "--max_steps",
               str(max_steps), "--seed", str(seed), "--overwrite_output_dir", "true"]  # fmt: skip
    if pairs:
        command += ["--lang_pairs", pairs]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    seconds = time.perf_counter() - started
    results = json.loads((folder / "test_results.json").read_text())
    train_seconds = json.loads((folder / "train_results.json").read_text()).get("train_runtime")
    return {"arm": name, "steps": max_steps, "seconds": round(seconds), "train_seconds": train_seconds, **results}


def score(row: dict, pair: str, metric: str) -> float:
    return row.get(f"test_{metric}_{pair}", row.get(f"test_{metric}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max_steps", type=int, default=recipe()["max_steps"])
    parser.add_argument("--out", type=Path, default=Path("runs/bench-multilingual"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sharing", action="store_true", help="the large pairs alone at their share of the steps")
    parser.add_argument("--arms", nargs="+", help="only these arms (bilingual-en-pt, multilingual, en-es, ...)")
    args = parser.parse_args()
    arms = {"bilingual-en-pt": (SMALL, args.max_steps), "multilingual": (None, args.max_steps)}
    if args.sharing or set(args.arms or ()) & set(LARGE):
        share = shares(recipe()["sampling_temperature"])
        print("shares of the steps: " + ", ".join(f"{pair} {p:.3f}" for pair, p in share.items()))
        arms |= {pair: (pair, round(share[pair] * args.max_steps)) for pair in LARGE}
    rows = [train(name, pairs, args.out, steps, args.seed) for name, (pairs, steps) in arms.items()
            if not args.arms or name in args.arms]  # fmt: skip
    print("| arm | steps | en-pt BLEU / chrF | en-es / en-fr / en-it BLEU / chrF | training s | run s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        has_pt = row["arm"] == "bilingual-en-pt" or "test_bleu_en-pt" in row
        pt = f"{score(row, 'en-pt', 'bleu'):.2f} / {score(row, 'en-pt', 'chrf'):.2f}" if has_pt else "-"
        large = [pair for pair in LARGE if f"test_bleu_{pair}" in row or row["arm"] == pair]
        others = ", ".join(f"{pair} {score(row, pair, 'bleu'):.2f} / {score(row, pair, 'chrf'):.2f}" for pair in large)
        print(f"| {row['arm']} | {row['steps']} | {pt} | {others or '-'} | {row['train_seconds']:.0f} | "
              f"{row['seconds']} |")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
