"""A small pair beside related large ones: en->pt cut to 2,000 training verses of the embedded Bible, trained
alone (a bilingual model) and inside one model with en->es, en->fr and en->it in full (recipes/multilingual-bible.yaml),
same shapes, same steps, one after the other on this machine; the test BLEU and chrF of en->pt (and of the other
pairs) from each run's test_results.json, with each run's training time.

    python benchmarks/multilingual_bible.py [--max_steps 4000] [--out runs/bench-multilingual] [--seed 1]

Run it alone on the machine (two CPU-heavy trainings, one after the other).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "multilingual-bible.yaml"
ARMS = {"bilingual en-pt": "en-pt:2000", "multilingual": None}  # None: the recipe's own lang_pairs


def train(name: str, pairs: str | None, out: Path, max_steps: int, seed: int) -> dict:
    folder = out / name.replace(" ", "-")
    command = [sys.executable, "-m", "aayn.train", str(RECIPE), "--output_dir", str(folder), "--max_steps",
               str(max_steps), "--seed", str(seed), "--overwrite_output_dir", "true"]  # fmt: skip
    if pairs:
        command += ["--lang_pairs", pairs]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    seconds = time.perf_counter() - started
    results = json.loads((folder / "test_results.json").read_text())
    train_seconds = json.loads((folder / "train_results.json").read_text()).get("train_runtime")
    return {"arm": name, "seconds": round(seconds), "train_seconds": train_seconds, **results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max_steps", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-multilingual"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = [train(name, pairs, args.out, args.max_steps, args.seed) for name, pairs in ARMS.items()]
    print("| arm | en-pt BLEU | en-pt chrF | other pairs' BLEU | training s | run s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        pt_bleu = row.get("test_bleu_en-pt", row.get("test_bleu"))
        pt_chrf = row.get("test_chrf_en-pt", row.get("test_chrf"))
        others = ", ".join(f"{key[10:]} {value:.2f}" for key, value in row.items()
                           if key.startswith("test_bleu_") and key != "test_bleu_en-pt")  # fmt: skip
        print(
            f"| {row['arm']} | {pt_bleu:.2f} | {pt_chrf:.2f} | {others or '-'} | {row['train_seconds']:.0f} | "
            f"{row['seconds']} |"
        )
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
