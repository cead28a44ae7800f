"""The base recipe's data path at WMT size: a WMT14-shaped corpus of N pairs built from the embedded Bible,
prepared by a first run, then found again by a rerun and a resume, each in a fresh process. Prints a table per N.

    python benchmarks/data_scale.py --pairs 100000 1000000 4500000 [--layout plain parquet] [--workdir DIR]

A pair is 1-3 consecutive aligned verses (English-German; by default mostly one, for a mean of ~27 English words a
pair, like WMT14 EN-DE's ~26), drawn with a seed; validation and test are the Bible's own. Layouts: `plain`
({split}.{lang} files) and `parquet` (the Hub's wmt/wmt14 layout, `de-en/{split}-00000-of-00001.parquet`). Each
run is a new process with its own timers; "imports" is what it spent importing torch and transformers before the
data. "to first batch" is the data path up to the first training batch (prepared data, lengths, the sampler's
batches, one collated batch); the step itself does not depend on N. "held" is the anonymous memory the lengths and
the sampler add (what stays through training), "peak" the largest resident set of the process (VmHWM) and of its
worker processes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RECIPE = HERE.parent / "recipes" / "base-wmt14-en-de.yaml"


def build_corpus(folder: Path, pairs: int, layout: str, weights: list[float], seed: int = 0) -> tuple[int, float]:
    """Write the corpus; returns the bytes of its training text and its mean English words per pair."""
    from aayn.data.bible import bible_splits

    rows = bible_splits("en", "de")
    verses = [(row["translation"]["en"], row["translation"]["de"]) for row in rows["train"]]
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(verses) - 3, size=pairs)
    sizes = rng.choice([1, 2, 3], size=pairs, p=np.asarray(weights) / sum(weights))
    english = [" ".join(verses[i][0] for i in range(s, s + k)) for s, k in zip(starts.tolist(), sizes.tolist())]
    german = [" ".join(verses[i][1] for i in range(s, s + k)) for s, k in zip(starts.tolist(), sizes.tolist())]
    splits = {
        "train": (english, german),
        **{
            split: tuple([r["translation"][lang] for r in rows[split]] for lang in ("en", "de"))
            for split in ("validation", "test")
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    for split, (en, de) in splits.items():
        if layout == "plain":
            for lang, lines in (("en", en), ("de", de)):
                (folder / f"{split}.{lang}").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            (folder / "de-en").mkdir(exist_ok=True)
            column = pa.StructArray.from_arrays([pa.array(de), pa.array(en)], names=["de", "en"])
            pq.write_table(pa.table({"translation": column}), folder / "de-en" / f"{split}-00000-of-00001.parquet")
    if layout == "parquet":  # the config table the Hub's dataset card holds
        files = "".join(f"  - split: {split}\n    path: de-en/{split}-*\n" for split in splits)
        (folder / "README.md").write_text(f"---\nconfigs:\n- config_name: de-en\n  data_files:\n{files}---\n")
    words = sum(len(line.split()) for line in english) / pairs
    return sum(len(line.encode()) + 1 for side in splits["train"] for line in side), words


def child(corpus: str, mode: str, out: str, workers: str) -> None:
    """One run of the data path, timed by stage, in this (fresh) process."""
    started = time.perf_counter()
    import datasets
    import torch  # noqa: F401  (what `aayn train` imports before the data: counted apart)
    from transformers import AutoTokenizer, DataCollatorForSeq2Seq

    from aayn.data import MaxTokensBatchSampler, example_lengths, prepare
    from aayn.training.arguments import parse_arguments
    from aayn.training.plan import data_plan

    times = {"imports": time.perf_counter() - started}

    def timed(name, function):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                times[name] = times.get(name, 0.0) + time.perf_counter() - start

        return wrapper

    prepare.DataPlan.load = timed("load corpus", prepare.DataPlan.load)
    prepare.train_tokenizer = timed("train BPE", prepare.train_tokenizer)
    prepare.tokenize_dataset = timed("tokenize", prepare.tokenize_dataset)
    prepare.file_digest = timed("hash files", prepare.file_digest)
    datasets.DatasetDict.save_to_disk = timed("write", datasets.DatasetDict.save_to_disk)
    start = time.perf_counter()
    model_args, data_args, args = parse_arguments([str(RECIPE), "--dataset_name", corpus, "--bf16", "false"])
    plan = data_plan(model_args, data_args, args)
    tokenizer = None
    if mode == "resume":  # a resumed run passes its saved tokenizer: the cached BPE's copy
        tokenizer = AutoTokenizer.from_pretrained(next(prepare.cache_root().glob("bpe-*")))
    prepared = prepare.prepare_data(plan, list(plan.splits), tokenizer=tokenizer, num_proc=int(workers) or None)
    times["prepared"] = time.perf_counter() - start
    anonymous = rss_anon()
    lengths = example_lengths(prepared.splits["train"])
    sampler = MaxTokensBatchSampler(lengths, data_args.max_tokens, seed=args.seed, rank=None)
    times["lengths + batches"] = time.perf_counter() - start - times["prepared"]
    held = rss_anon() - anonymous
    first = next(iter(sampler))
    collate = DataCollatorForSeq2Seq(prepared.tokenizer)
    collate([prepared.splits["train"][i] for i in first])
    times["to first batch"] = time.perf_counter() - start
    result = {
        "times": times,
        "held_mb": held / 1e6,
        "arrays_mb": (lengths.nbytes + sampler.order.nbytes + sampler.bounds.nbytes) / 1e6,
        "peak_mb": status("VmHWM") / 1e6,  # ru_maxrss would keep the parent's high-water mark across fork + exec
        "workers_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e3,
        "pairs": len(prepared.splits["train"]),
        "batches": len(sampler),
        "cache_mb": sum(p.stat().st_size for p in prepared.folder.rglob("*") if p.is_file()) / 1e6,
    }
    Path(out).write_text(json.dumps(result), encoding="utf-8")


def status(field: str) -> int:
    """A /proc/self/status memory field, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_anon() -> int:
    return status("RssAnon")


def run(corpus: Path, mode: str, cache: Path, workers: int) -> dict:
    out = cache.parent / f"result-{mode}.json"
    env = dict(os.environ, HF_DATASETS_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, __file__, "--child", str(corpus), mode, str(out), str(workers)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    result = json.loads(out.read_text(encoding="utf-8"))
    result["wall"] = time.perf_counter() - start
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 1_000_000, 4_500_000])
    parser.add_argument("--layout", nargs="+", choices=["plain", "parquet"], default=["plain"])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/aayn-data-scale"))
    parser.add_argument("--json", type=Path, help="also write every result here")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="tokenizing processes (default: the cores available, as aayn train; 1: tokenizers' own threads)",
    )
    parser.add_argument(
        "--verse_weights",
        type=float,
        nargs=3,
        default=[0.92, 0.06, 0.02],
        help="how often a pair is 1, 2 or 3 verses (default: mean ~27 English words a pair, WMT14 EN-DE's ~26; "
        "1 1 1: ~50 words, twice WMT's tokens)",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(*options.child)
        return
    from aayn.checks import available_cores

    results = []
    for pairs in options.pairs:
        for layout in options.layout:
            work = options.workdir / f"{layout}-{pairs}"
            shutil.rmtree(work, ignore_errors=True)
            text, words = build_corpus(work / "corpus", pairs, layout, options.verse_weights)
            cache = work / "hf-cache"  # nothing prepared, no datasets cache: a first run on a new machine
            workers = options.workers or available_cores()
            rows = {mode: run(work / "corpus", mode, cache, workers) for mode in MODES}
            shape = {"pairs": pairs, "layout": layout, "workers": workers, "text_mb": text / 1e6, "words": words}
            results.append({**shape, **rows})
            report(results[-1])
            shutil.rmtree(work, ignore_errors=True)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    growth(results)


def report(result: dict) -> None:
    print(
        f"\n{result['pairs']:,} pairs ({result['words']:.1f} English words a pair), {result['layout']} files, "
        f"{result['text_mb']:,.0f} MB of training text, "
        f"{result['workers']} tokenizing process(es)"
    )
    stages = ["hash files", "load corpus", "train BPE", "tokenize", "write", "prepared", "lengths + batches"]
    stages += ["to first batch", "imports"]
    print("| stage (s) | first run | rerun | resume |")
    print("| --- | --- | --- | --- |")
    for stage in stages:
        cells = [f"{result[mode]['times'][stage]:.1f}" if stage in result[mode]["times"] else "-" for mode in MODES]
        print(f"| {stage} | " + " | ".join(cells) + " |")
    for name, key in (
        ("process wall (s)", "wall"),
        ("held by lengths + batches (MB)", "held_mb"),
        ("their arrays (MB)", "arrays_mb"),
        ("peak RSS (MB)", "peak_mb"),
        ("workers' peak RSS (MB)", "workers_peak_mb"),
        ("prepared folder (MB)", "cache_mb"),
    ):
        print(f"| {name} | " + " | ".join(f"{result[mode][key]:,.1f}" for mode in MODES) + " |")  # fmt: skip
    first = result["first"]
    ratio = first["cache_mb"] / result["text_mb"]
    print(f"cache / text: {ratio:.2f}; {first['pairs']:,} pairs kept, {first['batches']:,} batches")


MODES = ("first", "rerun", "resume")


def growth(results: list[dict]) -> None:
    """Seconds and MB per million pairs between the smallest and largest N, and what they imply for 36M."""
    plain = sorted((r for r in results if r["layout"] == results[0]["layout"]), key=lambda r: r["pairs"])
    if len(plain) < 2:
        return
    small, large = plain[0], plain[-1]
    millions = (large["pairs"] - small["pairs"]) / 1e6
    print(f"\ngrowth between {small['pairs']:,} and {large['pairs']:,} pairs, per million pairs:")
    for mode in MODES:
        per = (large[mode]["times"]["to first batch"] - small[mode]["times"]["to first batch"]) / millions
        at36 = large[mode]["times"]["to first batch"] + per * (36 - large["pairs"] / 1e6)
        print(f"  {mode}: {per:.1f} s to first batch per million pairs -> ~{at36 / 60:.0f} min at 36M pairs")
    for key, name in (("held_mb", "held by lengths + batches"), ("cache_mb", "prepared folder")):
        per = (large["first"][key] - small["first"][key]) / millions
        at36 = large["first"][key] + per * (36 - large["pairs"] / 1e6)
        print(f"  {name}: {per:.1f} MB per million pairs -> ~{at36:,.0f} MB at 36M")


if __name__ == "__main__":
    main()
