"""Whole `aayn translate` commands timed against each other, as a user runs them: each `--model` (a folder, its
CTranslate2 or ONNX export) translates the first `--verses` English Bible test verses from standard input, with the
model's default search and with `--num_beams 1`; `--rounds` rounds alternating the models; the start of Python, the
import and the model's load included. Prints per (model, search) the seconds of each round, and whether the
outputs equal the first model's. Run alone on an idle machine.

    python benchmarks/translate_commands.py --model runs/demo-bible-en-fr --model runs/demo-ct2 [--verses 256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--verses", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from aayn.data import load_translation_dataset

    test = load_translation_dataset("bible", source_lang="en", target_lang="fr")["test"]
    text = "".join(row["translation"]["en"] + "\n" for row in test.select(range(args.verses)))
    searches = {"default": [], "greedy": ["--num_beams", "1"]}
    seconds = {(model, search): [] for model in args.model for search in searches}
    outputs = {}
    for _ in range(args.rounds):
        for search, flags in searches.items():
            for model in args.model:
                command = [sys.executable, "-m", "aayn.cli", "translate", "--model", model, *flags]
                start = time.perf_counter()
                done = subprocess.run(command, input=text, capture_output=True, text=True, check=True)
                seconds[model, search].append(round(time.perf_counter() - start, 2))
                outputs[model, search] = done.stdout
    for (model, search), times in seconds.items():
        same = outputs[model, search] == outputs[args.model[0], search]
        lines = zip(outputs[model, search].splitlines(), outputs[args.model[0], search].splitlines())
        differ = sum(a != b for a, b in lines)
        print(json.dumps({"model": model, "search": search, "seconds": times, "median_s": statistics.median(times),
                          "equal_to_first": same, "lines_differing": differ}))  # fmt: skip


if __name__ == "__main__":
    main()
