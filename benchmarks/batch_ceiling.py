"""What `aayn serve` can reach at N concurrent clients, with no HTTP at all: a closed loop of N clients sending one
verse each caps a model call at N sentences, so the same verses translated in calls of N, in one process, bound
the server's throughput at N clients. Against one `translate` call over all of them (what `aayn translate` does),
alternated, with the decoder steps each run took and the rows (sentences x beams) a step decoded.

    python benchmarks/batch_ceiling.py [--model FOLDER] [--sentences 512] [--calls 8 32 128] [--repeats 2]

Without --model, a demo-shaped model is trained 300 steps here (`aayn.bench.decoding.train_demo_model`), as
`benchmarks/serve_load.py` does. A run's time is about fixed_cost x steps + row_cost x rows: the printed steps and
rows give both, hence what a cheaper step would buy.
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model")
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--calls", type=int, nargs="+", default=[8, 32, 128], help="sentences per call")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from aayn.bench.decoding import serving_benchmark_inputs
    from aayn.translation.opening import open_translator

    folder, texts = serving_benchmark_inputs(args.model, args.sentences, tempfile.mkdtemp(prefix="batch-ceiling-"))
    translator = open_translator([folder])
    from aayn.model.decoding_aayn import Decoding

    steps = []  # rows of each decoder step, counted around the search's step (a hook on the decoder would make
    step = Decoding.log_probs  # it take the modules' path, `decoding_aayn.plain_steps`)
    Decoding.log_probs = lambda self, history, *args: steps.append(history.shape[0]) or step(self, history, *args)
    translator.translate(texts[:64])  # warm up

    def run(size: int | None) -> tuple[float, int, int]:
        steps.clear()
        started = time.perf_counter()
        for i in range(0, len(texts), size or len(texts)):
            translator.translate(texts[i : i + (size or len(texts))])
        return len(texts) / (time.perf_counter() - started), len(steps), sum(steps)

    print(f"{len(texts)} Bible test verses, model {folder}\n")
    print("| run | sentences/s | / one call | decoder steps | rows a step |")
    print("| --- | --- | --- | --- | --- |")
    for repeat in range(args.repeats):
        one, one_steps, one_rows = run(None)
        print(f"| one call (repeat {repeat + 1}) | {one:.1f} | 1.00 | {one_steps} | {one_rows / one_steps:.0f} |")
        for size in args.calls:
            speed, count, rows = run(size)
            print(f"| calls of {size} | {speed:.1f} | {speed / one:.2f} | {count} | {rows / count:.0f} |", flush=True)


if __name__ == "__main__":
    main()
