"""Tokenize a parallel corpus for the model: one batched, cached pass over Arrow batches, length limits, empty pairs
filtered, token ids stored in the narrowest type that holds the vocabulary."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict, Features, IterableDataset, IterableDatasetDict, Sequence, Value
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerBase
from transformers.utils import logging

logger = logging.get_logger(__name__)

OVERLONG = ("truncate", "drop")
BATCH_ROWS = 10_000  # pairs per encoder call; a split of fewer than this per worker process is encoded in this one
COLUMNS = ("input_ids", "attention_mask", "labels")


def id_type(tokenizer: PreTrainedTokenizerBase) -> str:
    """uint16 for vocabularies up to 65,536 tokens (the paper's 37,000 included), else uint32."""
    return "uint16" if len(tokenizer) <= 2**16 else "uint32"


class PairEncoder:
    """Both sides of a batch of pairs to token ids, with the limits applied; picklable for datasets' worker
    processes. It calls the `tokenizers` encoder itself where the tokenizer has one (transformers' call around it
    adds Python work per sentence: docs/measurements.md) with the truncation transformers would set, and the
    tokenizer's own call otherwise."""

    def __init__(self, tokenizer, source_lang, target_lang, max_source_length, max_target_length, truncate,
                 source_prefix: str = ""):  # fmt: skip
        self.langs, self.limits, self.truncate = (
            (source_lang, target_lang),
            (max_source_length, max_target_length),
            truncate,
        )
        self.source_prefix = source_prefix  # a multilingual model's target token (`aayn.data.multilingual`)
        self.id_type = pa.from_numpy_dtype(np.dtype(id_type(tokenizer)))
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.tokenizer = None if backend is not None else tokenizer
        self.encoders = ()
        if backend is not None:
            self.encoders = tuple(self._encoder(backend, limit, tokenizer.truncation_side) for limit in self.limits)

    def _encoder(self, backend: Tokenizer, limit: int, side: str) -> Tokenizer:
        encoder = Tokenizer.from_str(backend.to_str())  # a copy: the caller's tokenizer keeps its settings
        encoder.no_padding()
        if self.truncate:
            encoder.enable_truncation(limit, strategy="longest_first", direction=side)
        else:
            encoder.no_truncation()
        return encoder

    def _encode(self, texts: list[str], side: int) -> list[list[int]]:
        if self.tokenizer is None:
            return [encoding.ids for encoding in self.encoders[side].encode_batch(texts)]
        text = {"text_target": texts} if side else {"text": texts}
        limit = self.limits[side] if self.truncate else None
        return self.tokenizer(**text, max_length=limit, truncation=self.truncate, return_attention_mask=False)[
            "input_ids"
        ]

    def pairs(self, sources: list, targets: list) -> tuple[list[list[int]], list[list[int]]]:
        """The ids of the pairs with text on both sides (and, with overlong='drop', within both limits)."""
        for lang, texts in zip(self.langs, (sources, targets)):
            if any(text is None for text in texts):
                raise ValueError(f"a row of the dataset has no {lang!r} text")
        kept = [i for i, (s, t) in enumerate(zip(sources, targets)) if s.strip() and t.strip()]
        source = self._encode([self.source_prefix + sources[i] for i in kept], 0)
        target = self._encode([targets[i] for i in kept], 1)
        if not self.truncate:
            fits = [
                i
                for i, (s, t) in enumerate(zip(source, target))
                if len(s) <= self.limits[0] and len(t) <= self.limits[1]
            ]
            source, target = [source[i] for i in fits], [target[i] for i in fits]
        return source, target

    def _lists(self, rows: list[list[int]], values_type) -> pa.ListArray:
        offsets = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, rows), dtype=np.int32, count=len(rows)), out=offsets[1:])
        values = np.fromiter((i for row in rows for i in row), dtype=values_type.to_pandas_dtype(), count=offsets[-1])
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=values_type))

    def arrow(self, table: pa.Table) -> pa.Table:
        """A batch of the `translation` column as Arrow in, the token-id columns as Arrow out."""
        column = table.column("translation").combine_chunks()
        sources, targets = (pc.struct_field(column, lang).to_pylist() for lang in self.langs)
        source, target = self.pairs(sources, targets)
        input_ids = self._lists(source, self.id_type)
        mask = pa.ListArray.from_arrays(input_ids.offsets, pa.array(np.ones(len(input_ids.values), dtype=np.int8)))
        return pa.table({"input_ids": input_ids, "attention_mask": mask, "labels": self._lists(target, self.id_type)})

    def python(self, batch: dict) -> dict:
        """The same for a streamed batch of Python rows."""
        rows = [row if row is not None else {} for row in batch["translation"]]
        source, target = self.pairs(*([row.get(lang) for row in rows] for lang in self.langs))
        return {"input_ids": source, "attention_mask": [[1] * len(ids) for ids in source], "labels": target}


def token_features(tokenizer: PreTrainedTokenizerBase) -> Features:
    ids = Sequence(Value(id_type(tokenizer)))
    return Features({"input_ids": ids, "attention_mask": Sequence(Value("int8")), "labels": ids})


@contextmanager
def serial_tokenizers(num_proc: int | None):
    """Worker processes encode one sentence at a time: `tokenizers` would otherwise warn in each forked worker that
    it turns off the threads its parent used."""
    if not num_proc or num_proc < 2:
        yield
        return
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


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
    cache_file_names: dict[str, str] | None = None,
    source_prefix: str = "",
):
    """`input_ids`, `attention_mask` and `labels` (each ending in `</s>`) for every pair with text on both sides;
    `source_prefix` (a multilingual model's `>>fr<< `) before each source text.

    Over-long sentences are truncated (keeping `</s>`) or dropped, per `overlong`. A dataset loaded from files
    caches its result next to its Arrow files, so a second run with the same tokenizer and settings skips the work
    (`cache_file_names`, per split, puts it elsewhere); `num_proc` > 1 splits the work across processes. Ids are
    uint16 where the vocabulary allows (uint32 otherwise), the mask int8.
    """
    if overlong not in OVERLONG:
        raise ValueError(f"overlong={overlong!r}; allowed: {', '.join(OVERLONG)}")
    for name, value in (("max_source_length", max_source_length), ("max_target_length", max_target_length)):
        if not isinstance(value, int) or value < 2:
            raise ValueError(f"{name} must be an integer >= 2 (one token plus </s>), got {value!r}")
    encoder = PairEncoder(
        tokenizer, source_lang, target_lang, max_source_length, max_target_length, overlong == "truncate",
        source_prefix,
    )  # fmt: skip
    if isinstance(dataset, (DatasetDict, IterableDatasetDict)):
        names = cache_file_names or {}
        out = {
            split: _tokenize(rows, encoder, tokenizer, split, num_proc, load_from_cache_file, names.get(split))
            for split, rows in dataset.items()
        }
        return type(dataset)(out)
    name = next(iter((cache_file_names or {}).values()), None)
    return _tokenize(dataset, encoder, tokenizer, "dataset", num_proc, load_from_cache_file, name)


def workers(num_proc: int | None, rows: int) -> int | None:
    """The worker processes worth starting for `rows` pairs (None: encode in this process)."""
    useful = min(num_proc or 1, rows // BATCH_ROWS)
    return useful if useful > 1 else None


def _tokenize(dataset, encoder: PairEncoder, tokenizer, split: str, num_proc, load_from_cache_file, cache_file_name):
    if isinstance(dataset, IterableDataset):  # rows are checked as they stream
        return dataset.map(encoder.python, batched=True, remove_columns=dataset.column_names)
    processes = workers(num_proc, len(dataset))
    with serial_tokenizers(processes):
        out = (
            dataset.with_format("arrow")
            .map(
                encoder.arrow,
                batched=True,
                batch_size=BATCH_ROWS,
                remove_columns=dataset.column_names,
                features=token_features(tokenizer),
                num_proc=processes,
                load_from_cache_file=load_from_cache_file,
                cache_file_name=cache_file_name,
                desc=f"tokenizing {split}",
            )
            .with_format(None)
        )
    if len(out) != len(dataset):
        logger.info(f"{split}: kept {len(out):,} of {len(dataset):,} pairs (empty or, with overlong='drop', over-long)")
    return out
