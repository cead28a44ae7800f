"""One model folder decoded by two checkouts of aayn (the code before a change and after it), in one run: a worker
process per tree (its `src/` first on the path), the arms alternated repeat by repeat, greedy and beam 4 (the
folder's §6.1 defaults), batches of 32 and one sentence at a time. A first, untimed run of each arm compares the
outputs with the before tree's (token for token); then sentences/s, median and range of the repeats.

    python benchmarks/decoding_two_trees.py --before /tmp/aayn-before [--after .] [--model FOLDER]
        [--sentences 256] [--repeats 4] [--after_options '{"compiled_steps": true}']

`--after_options`: `generate()` keywords for a third arm, the after tree with them (its first run, where a compiled
step compiles, is printed and not timed, as every arm's).

`--before`: a checkout of the earlier code (`git worktree add /tmp/aayn-before COMMIT`). Without --model, a
demo-shaped model is trained 600 steps here (`aayn.bench.decoding.train_demo_model`) and saved with sdpa attention,
as `aayn train` saves one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = r"""
import json, sys, time
import torch
import aayn
from transformers import AutoTokenizer
from aayn import AaynForConditionalGeneration
folder, options, texts = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.stdin.readline())
model = AaynForConditionalGeneration.from_pretrained(folder).eval()
tokenizer = AutoTokenizer.from_pretrained(folder)
print(json.dumps({"aayn": aayn.__file__}), flush=True)
for line in sys.stdin:
    beams, size, count = json.loads(line)
    outputs, started = [], time.perf_counter()
    with torch.inference_mode():
        for i in range(0, count, size):
            batch = tokenizer(texts[i : min(i + size, count)], return_tensors="pt", padding=True)
            outputs += model.generate(**batch, num_beams=beams, **options).tolist()
    print(json.dumps({"seconds": time.perf_counter() - started, "outputs": outputs}), flush=True)
"""


class Worker:
    def __init__(self, tree: Path, folder: str, texts: list[str], options: str = "{}"):
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, folder, options], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=env,
        )  # fmt: skip
        self.process.stdin.write(json.dumps(texts) + "\n")
        self.process.stdin.flush()
        self.source = json.loads(self.process.stdout.readline())["aayn"]

    def run(self, beams: int, size: int, count: int) -> dict:
        self.process.stdin.write(json.dumps([beams, size, count]) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--model")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--after_options", help="generate() keywords (JSON) for a third arm: the after tree with them")
    args = parser.parse_args()
    from aayn.bench.decoding import train_demo_model
    from aayn.data import load_translation_dataset

    folder = args.model
    if folder is None:
        model, tokenizer, _ = train_demo_model(600)
        folder = tempfile.mkdtemp(prefix="two-trees-")
        model.config._attn_implementation = "sdpa"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    test = load_translation_dataset("bible", source_lang="en", target_lang="fr")["test"]
    texts = [row["translation"]["en"] for row in test.select(range(args.sentences))]
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    workers = {name: Worker(tree, folder, texts) for name, tree in trees.items()}
    if args.after_options:
        workers[f"after, {args.after_options}"] = Worker(trees["after"], folder, texts, args.after_options)
    arms = {"greedy, batches of 32": (1, 32, len(texts)), "beam 4, batches of 32": (4, 32, len(texts))}
    arms["greedy, one at a time"] = (1, 1, min(64, len(texts)))
    arms["beam 4, one at a time"] = (4, 1, min(64, len(texts)))
    print(f"model {folder}, {len(texts)} English Bible test verses; " + ", ".join(
        f"{name}: {worker.source}" for name, worker in workers.items()))  # fmt: skip
    seconds = {(name, arm): [] for name in workers for arm in arms}
    for repeat in range(args.repeats + 1):  # the first repeat warms up (a compiled arm compiles): compared, not timed
        order = list(workers) if repeat % 2 == 0 else list(reversed(workers))
        for arm, (beams, size, count) in arms.items():
            results = {name: workers[name].run(beams, size, count) for name in order}
            if repeat == 0:
                same = {name: result["outputs"] == results["before"]["outputs"] for name, result in results.items()}
                first = ", ".join(f"{name} {result['seconds']:.1f} s" for name, result in results.items())
                print(f"{arm}: the same outputs as before's: {same}; the first run: {first}")
                continue
            for name, result in results.items():
                seconds[(name, arm)].append(result["seconds"])
    for worker in workers.values():
        worker.close()
    print(f"\n| tree (sentences/s, median and range of {args.repeats}) | " + " | ".join(arms) + " |")
    print("| --- " * (len(arms) + 1) + "|")
    for name in workers:
        cells = []
        for arm, (_, _, count) in arms.items():
            speeds = [count / s for s in seconds[(name, arm)]]
            cells.append(f"{statistics.median(speeds):.1f} ({min(speeds):.1f}-{max(speeds):.1f})")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
