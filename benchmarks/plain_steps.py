"""The search's plain steps (`AaynDecoder.step` with the cache's attention kernels, the default) against the
decoder's `forward` at every step (`plain_steps` forced off, as recorded outputs would), in one process,
alternated: first that both give the same n-best texts and scores, then sentences/s for one `translate` call over
all the verses, calls of 32 and of 8, and one verse at a time.

    python benchmarks/plain_steps.py [--model FOLDER] [--sentences 512] [--repeats 4]

Without --model, a demo-shaped model is trained 300 steps here (`aayn.bench.decoding.train_demo_model`).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model")
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    from aayn.bench.decoding import serving_benchmark_inputs
    from aayn.model import decoding_aayn
    from aayn.translation.opening import open_translator

    folder, texts = serving_benchmark_inputs(args.model, args.sentences, tempfile.mkdtemp(prefix="plain-steps-"))
    translator = open_translator([folder])
    plain_steps = decoding_aayn.plain_steps

    def use(plain: bool) -> None:
        decoding_aayn.plain_steps = plain_steps if plain else (lambda decoder: False)

    use(True)
    plain = translator.nbest(texts, 2)
    use(False)
    same = plain == translator.nbest(texts, 2)
    print(f"{len(texts)} Bible test verses, model {folder}; 2-best texts and scores the same on both paths: {same}\n")

    def speed(size: int, count: int) -> float:
        started = time.perf_counter()
        for i in range(0, count, size):
            translator.translate(texts[i : i + size])
        return count / (time.perf_counter() - started)

    runs = {"one call": (len(texts), len(texts)), "calls of 32": (32, len(texts)), "calls of 8": (8, len(texts))}
    runs["one at a time"] = (1, min(64, len(texts)))
    measured = {True: [], False: []}
    for repeat in range(args.repeats):
        for path in (True, False) if repeat % 2 == 0 else (False, True):
            use(path)
            measured[path].append([speed(*run) for run in runs.values()])
    use(True)
    print(f"| path (sentences/s, median and range of {args.repeats}) | " + " | ".join(runs) + " |")
    print("| --- " * (len(runs) + 1) + "|")
    for path, name in ((False, "the modules every step"), (True, "plain steps (default)")):
        cells = [f"{statistics.median(c):.1f} ({min(c):.1f}-{max(c):.1f})" for c in zip(*measured[path])]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
