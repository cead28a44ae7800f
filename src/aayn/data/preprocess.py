"""Tokenize a parallel corpus for the model: batched, cached `Dataset.map`, length limits, empty pairs filtered."""

from __future__ import annotations

from typing import Literal

from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict
from transformers import PreTrainedTokenizerBase
from transformers.utils import logging

logger = logging.get_logger(__name__)

OVERLONG = ("truncate", "drop")


def _texts(batch: dict, lang: str) -> list[str]:
    texts = [row.get(lang) if row is not None else None for row in batch["translation"]]
    if any(text is None for text in texts):
        raise ValueError(f"a row of the dataset has no {lang!r} text")
    return texts


def tokenize_dataset(
    dataset: Dataset | DatasetDict | IterableDataset | IterableDatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    *,
    source_lang: str,
    target_lang: str,
    max_source_length: int = 256,
    max_target_length: int = 256,
    overlong: Literal["truncate", "drop"] = "truncate",
    num_proc: int | None = None,
    load_from_cache_file: bool = True,
):
    """`input_ids`, `attention_mask` and `labels` (each ending in `</s>`) for every pair with text on both sides.

    Over-long sentences are truncated (keeping `</s>`) or dropped, per `overlong`. A dataset loaded from files
    caches each step next to its Arrow files, so a second run with the same tokenizer and settings skips the work;
    `num_proc` > 1 splits the work across processes.
    """
    if overlong not in OVERLONG:
        raise ValueError(f"overlong={overlong!r}; allowed: {', '.join(OVERLONG)}")
    for name, value in (("max_source_length", max_source_length), ("max_target_length", max_target_length)):
        if not isinstance(value, int) or value < 2:
            raise ValueError(f"{name} must be an integer >= 2 (one token plus </s>), got {value!r}")
    truncate = overlong == "truncate"
    streaming = isinstance(dataset, (IterableDataset, IterableDatasetDict))
    parallel = {} if streaming else {"num_proc": num_proc, "load_from_cache_file": load_from_cache_file}

    def nonempty(batch: dict) -> list[bool]:
        return [
            bool(s.strip()) and bool(t.strip()) for s, t in zip(_texts(batch, source_lang), _texts(batch, target_lang))
        ]

    def encode(batch: dict) -> dict:
        source = _texts(batch, source_lang)
        target = _texts(batch, target_lang)
        limits = (max_source_length, max_target_length) if truncate else (None, None)
        features = tokenizer(source, max_length=limits[0], truncation=truncate, return_token_type_ids=False)
        labels = tokenizer(text_target=target, max_length=limits[1], truncation=truncate, return_token_type_ids=False)
        return {
            "input_ids": features["input_ids"],
            "attention_mask": features["attention_mask"],
            "labels": labels["input_ids"],
        }

    def fits(batch: dict) -> list[bool]:
        return [
            len(s) <= max_source_length and len(t) <= max_target_length
            for s, t in zip(batch["input_ids"], batch["labels"])
        ]

    columns = dataset.column_names
    columns = next(iter(columns.values())) if isinstance(columns, dict) else columns
    steps = dataset.filter(nonempty, batched=True, **parallel, **_desc(streaming, "dropping empty pairs"))
    steps = steps.map(encode, batched=True, remove_columns=columns, **parallel, **_desc(streaming, "tokenizing"))
    if not truncate:
        steps = steps.filter(fits, batched=True, **parallel, **_desc(streaming, "dropping over-long pairs"))
    if not streaming:
        for split, before, after in _sizes(dataset, steps):
            if before != after:
                logger.info(f"{split}: kept {after:,} of {before:,} pairs (empty or, with overlong='drop', over-long)")
    return steps


def _desc(streaming: bool, text: str) -> dict:
    return {} if streaming else {"desc": text}


def _sizes(before, after):
    if isinstance(before, DatasetDict):
        return [(split, len(before[split]), len(after[split])) for split in before]
    return [("dataset", len(before), len(after))]
