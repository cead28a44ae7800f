"""Batches of similar-length sentences under a token budget, and source sentences cut to a length limit, with numpy
and the standard library only: translating with an exported CTranslate2 folder (`aayn.formats.ctranslate2.engine`)
imports no torch, and batches exactly as translating with the model does (the batch's longest source sets the length
limit, so the batches decide outputs)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

logger = logging.getLogger("aayn.formats.aayn.engine")


def length_order(lengths: np.ndarray, seed: int) -> np.ndarray:
    """The indices of `lengths` from shortest to longest, equal lengths in an order drawn with `seed`."""
    tie_break = np.random.default_rng(seed).permutation(len(lengths))
    return tie_break[np.argsort(lengths[tie_break], kind="stable")]


def cut_batches(order: np.ndarray, lengths: np.ndarray, max_tokens: int) -> np.ndarray:
    """Where `order` (indices from shortest to longest, as `length_order` gives them) is cut greedily into batches
    whose padded size `len(batch) * max(length)` stays <= `max_tokens`: batch i is `order[bounds[i]:bounds[i + 1]]`.
    A batch takes examples while the budget holds and is closed by the first that would break it; in length order
    the newest example is the batch's longest, so each batch's end is found with one vectorized search instead of a
    Python step per example (WMT has millions). An example longer than the budget is a batch of its own."""
    ordered = np.asarray(lengths)[order].astype(np.int64)  # (N,) nondecreasing
    bounds, start, total = [0], 0, len(ordered)
    while start < total:
        # the batch [start, start + k) fits while k * ordered[start + k - 1] <= max_tokens, nondecreasing in k
        window = ordered[start : start + max(1, max_tokens // max(int(ordered[start]), 1))]
        padded = np.arange(1, len(window) + 1) * window
        start += max(1, int(np.searchsorted(padded, max_tokens, side="right")))
        bounds.append(start)
    return np.asarray(bounds, dtype=np.int64)


def bucket_of(lengths, buckets: Sequence[int]) -> np.ndarray:
    """Each length rounded up to the first of `buckets` (ascending) that holds it; a length past the last bucket
    stays as it is."""
    lengths = np.asarray(lengths, dtype=np.int64)
    edges = np.asarray(buckets, dtype=np.int64)
    index = np.searchsorted(edges, lengths, side="left")
    return np.where(index < len(edges), edges[np.minimum(index, len(edges) - 1)], lengths)


def cut_bucketed(order: np.ndarray, lengths: np.ndarray, max_tokens: int, buckets: Sequence[int]) -> np.ndarray:
    """`cut_batches` on lengths rounded up to their bucket, each bucket cut on its own: every batch of a bucket but
    its last holds `max_tokens // bucket` examples, so padded to its bucket, a batch has one of few shapes."""
    rounded = bucket_of(np.asarray(lengths)[order], buckets)  # nondecreasing: `order` is by length
    starts = np.flatnonzero(np.r_[True, rounded[1:] != rounded[:-1]])
    bounds = [0]
    for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(order)]):
        per_batch = max(1, max_tokens // int(rounded[start]))
        bounds += list(range(start + per_batch, end, per_batch)) + [end]
    return np.asarray(bounds, dtype=np.int64)


def batch_lists(order: np.ndarray, bounds: np.ndarray) -> list[list[int]]:
    return [order[a:b].tolist() for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


def decoding_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """The batches of `MaxTokensBatchSampler(lengths, max_tokens, shuffle=False)`, in its order: what translating
    and scoring decode. A sentence longer than `max_tokens` makes a batch of its own."""
    max_tokens = max(max_tokens, 1)
    lengths = np.minimum(np.asarray(lengths, dtype=np.int64), max_tokens)
    order = length_order(lengths, 0)
    return batch_lists(order, cut_batches(order, lengths, max_tokens))


def encode_sources(
    encode: Callable[[list[str]], list[list[int]]], texts: list[str], limit: int
) -> tuple[list[int], list[list[int]]]:
    """(the indices of the texts that are not blank, their token ids from `encode` (eos-terminated), cut to `limit`
    tokens with their eos kept and one warning for all)."""
    todo = [i for i, text in enumerate(texts) if text.strip()]
    if not todo:
        return todo, []
    encoded = encode([texts[i] for i in todo])
    long = [todo[j] + 1 for j, ids in enumerate(encoded) if len(ids) > limit]
    if long:
        logger.warning(f"{len(long)} input(s) longer than {limit} tokens truncated (numbers {long[:10]}...)")
        encoded = [ids if len(ids) <= limit else ids[: limit - 1] + ids[-1:] for ids in encoded]
    return todo, encoded


def padded(tokenizer, rows: list[list[int]]):
    """`tokenizer.pad` of token-id rows into torch tensors (for the torch model's batches), without the warning
    transformers 4.57 gives a fast tokenizer for it (its own collators pad the same way)."""
    from transformers.data.data_collator import pad_without_fast_tokenizer_warning

    return pad_without_fast_tokenizer_warning(tokenizer, {"input_ids": rows}, return_tensors="pt")
