"""Throughput of tokenizer training and preprocessing, and the padding that each batching scheme wastes.

    python benchmarks/data.py [--wmt ../shared/data/wmt14-mini] [--stream_pairs 1000000] [--max_tokens 4096]

Corpora: wmt14-mini en-de (train split) and the embedded Bible en-fr (train split). Padding: our
MaxTokensBatchSampler against transformers' LengthGroupedSampler (`group_by_length`) and random batches, both
with the mean number of sentences per batch that the max-tokens sampler produced.
"""

import argparse
import itertools
import os
import platform
import time

import numpy as np
import torch
from datasets import IterableDataset
from transformers.trainer_pt_utils import LengthGroupedSampler

from aayn.data import (
    MaxTokensBatchSampler,
    load_translation_dataset,
    padding_fraction,
    tokenize_dataset,
    train_tokenizer,
)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def chunks(indices, size):
    return [indices[i : i + size] for i in range(0, len(indices), size)]


def corpus_rows(name, config, source, target, stream_pairs):
    data = load_translation_dataset(name, config, source_lang=source, target_lang=target)
    train = data["train"]
    print(f"\n## {name} {source}-{target}: {len(train):,} training pairs")
    tokenizer, seconds = timed(
        lambda: train_tokenizer(train, source_lang=source, target_lang=target, show_progress=False)
    )
    print(f"tokenizer (vocab {len(tokenizer):,}): {2 * len(train) / seconds:,.0f} sentences/s ({seconds:.1f}s)")
    if stream_pairs:

        def repeated():
            yield from itertools.islice(itertools.cycle(train), stream_pairs)

        streamed = IterableDataset.from_generator(repeated)
        _, seconds = timed(
            lambda: train_tokenizer(streamed, source_lang=source, target_lang=target, show_progress=False)
        )
        print(
            f"tokenizer on {stream_pairs:,} streamed pairs: "
            f"{2 * stream_pairs / seconds:,.0f} sentences/s ({seconds:.1f}s)"
        )
    for num_proc in (None, 2):
        tokenized, seconds = timed(
            lambda num_proc=num_proc: tokenize_dataset(
                data, tokenizer, source_lang=source, target_lang=target, num_proc=num_proc, load_from_cache_file=False
            )
        )
        pairs = sum(len(split) for split in data.values())
        print(f"preprocessing, num_proc={num_proc}: {pairs / seconds:,.0f} pairs/s ({seconds:.1f}s for {pairs:,})")
    return tokenized["train"]


def padding_table(train, max_tokens):
    source = [len(ids) for ids in train["input_ids"]]
    target = [len(ids) for ids in train["labels"]]
    lengths = [max(s, t) for s, t in zip(source, target)]
    ours = list(MaxTokensBatchSampler(lengths, max_tokens, seed=0))
    size = round(len(lengths) / len(ours))
    grouped = chunks(
        list(LengthGroupedSampler(size, lengths=lengths, generator=torch.Generator().manual_seed(0))), size
    )
    shuffled = chunks(np.random.default_rng(0).permutation(len(lengths)).tolist(), size)
    print(f"\npadding fraction (source + target), max_tokens={max_tokens}, {size} sentences per batch on average:")
    print("| batching | padding |\n| --- | --- |")
    for name, batches in (
        (f"aayn MaxTokensBatchSampler (max_tokens={max_tokens})", ours),
        (f"transformers group_by_length (batch size {size})", grouped),
        (f"random (batch size {size})", shuffled),
    ):
        print(f"| {name} | {padding_fraction(batches, source, target):.1%} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--wmt",
        default=os.environ.get("AAYN_WMT14_MINI"),
        required="AAYN_WMT14_MINI" not in os.environ,
        help="wmt14-mini folder (default: $AAYN_WMT14_MINI)",
    )
    parser.add_argument("--stream_pairs", type=int, default=1_000_000)
    parser.add_argument("--max_tokens", type=int, default=4096)
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads; "
        f"{time.strftime('%Y-%m-%d')}"
    )
    wmt = corpus_rows(args.wmt, "de-en", "en", "de", args.stream_pairs)
    padding_table(wmt, args.max_tokens)
    bible = corpus_rows("bible", None, "en", "fr", 0)
    padding_table(bible, args.max_tokens)


if __name__ == "__main__":
    main()
