"""Token-based batching (§5.1: "sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target tokens").

transformers has `group_by_length` (a `LengthGroupedSampler` with a fixed number of sentences per batch) but no
batching by a token budget; this is fairseq's `--max-tokens` as a torch `Sampler` of index lists.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data import Sampler

from .token_batches import batch_lists, bucket_of, cut_batches, cut_bucketed, length_order


def example_lengths(dataset) -> np.ndarray:
    """max(source tokens, target tokens) per example of a tokenized dataset: what a padded batch pays per row.

    Computed by Arrow from the list offsets, a batch of rows at a time (no Python loop, no copy of the ids), into
    the narrowest integer type that holds them: 4.5M examples take 9 MB."""
    columns = dataset.select_columns(["input_ids", "labels"]).with_format("arrow")
    parts = [
        pc.max_element_wise(pc.list_value_length(batch["input_ids"]), pc.list_value_length(batch["labels"]))
        .to_numpy()
        .astype(np.uint32)
        for batch in columns.iter(batch_size=1_000_000)
    ]
    lengths = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
    pa.default_memory_pool().release_unused()  # Arrow's allocator keeps the freed per-batch buffers otherwise
    return lengths.astype(np.uint16) if len(lengths) and lengths.max() < 2**16 else lengths


class MaxTokensBatchSampler(Sampler[list[int]]):
    """Batches of similar-length examples whose padded size `len(batch) * max(length)` stays <= `max_tokens`.

    Examples are sorted by length (ties broken by a seeded shuffle) and cut greedily into batches once; each epoch
    shuffles the order of those batches by `seed + epoch` (call `set_epoch`, as the Trainer does). Every example is
    in exactly one batch. With `num_replicas` > 1, batches are dealt round-robin to the replicas after the shuffle,
    and when their number does not divide evenly the largest batches are split in two, so every replica gets the
    same number of batches (data-parallel steps stay in lock-step) and no example is repeated or dropped.
    The order and the batches' bounds are two numpy arrays (4.5M examples: 18 MB); lists of indices are made for
    one batch at a time, as it is yielded.
    `rank=None` yields every replica's batches interleaved, for a loader that deals them itself (Accelerate's
    `BatchSamplerShard` gives batch i to process i % num_replicas, which is exactly the shard of that rank).
    `buckets` (ascending lengths): each example counts as the first bucket that holds it, and each bucket is cut on
    its own into batches of `max_tokens // bucket` examples (its last one fewer), which `BucketPadding` pads to the
    bucket: a step then has one of at most twice as many shapes as there are buckets (a compiled or graph-captured
    step recompiles that often, not once per batch length).
    """

    def __init__(
        self,
        lengths: Sequence[int],
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int | None = 0,
        buckets: Sequence[int] | None = None,
    ):
        lengths = np.asarray(lengths)
        if lengths.ndim != 1 or len(lengths) == 0:
            raise ValueError("lengths must be a non-empty sequence of example lengths")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if lengths.max() > max_tokens:
            longest = int(lengths.argmax())
            raise ValueError(
                f"example {longest} is {lengths[longest]} tokens long, more than max_tokens={max_tokens}; "
                "raise max_tokens or lower max_source_length / max_target_length"
            )
        if buckets is not None:
            check_buckets(buckets, int(lengths.max()), max_tokens)
        if rank is not None and not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}")
        if len(lengths) < num_replicas:
            raise ValueError(f"{len(lengths)} examples cannot feed num_replicas={num_replicas} replicas")
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.num_replicas, self.rank, self.epoch = num_replicas, rank, 0
        order = length_order(lengths, seed)
        self.order = order.astype(np.int32) if len(order) < 2**31 else order
        cut = (
            cut_batches(order, lengths, max_tokens)
            if buckets is None
            else cut_bucketed(order, lengths, max_tokens, buckets)
        )
        self.bounds = self._even(cut)

    def _even(self, bounds: np.ndarray) -> np.ndarray:
        """Split the largest batches (the first of equals) in two until the replicas get as many batches each."""
        while (len(bounds) - 1) % self.num_replicas:
            sizes = np.diff(bounds)
            largest = int(sizes.argmax())
            if sizes[largest] < 2:
                raise ValueError(
                    f"{len(sizes)} single-example batches cannot be dealt evenly to {self.num_replicas} replicas"
                )
            bounds = np.insert(bounds, largest + 1, bounds[largest] + sizes[largest] // 2)
        return bounds

    @property
    def batches(self) -> list[list[int]]:
        """Every batch, unshuffled, as lists of example indices."""
        return batch_lists(self.order, self.bounds)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _epoch_order(self) -> np.ndarray:
        """The batches' numbers in this epoch's order."""
        count = len(self.bounds) - 1
        if not self.shuffle:
            return np.arange(count)
        return np.random.default_rng(self.seed + self.epoch).permutation(count)

    def __iter__(self) -> Iterator[list[int]]:
        numbers = self._epoch_order()
        if self.rank is not None:
            numbers = numbers[self.rank :: self.num_replicas]
        for number in numbers.tolist():
            yield self.order[self.bounds[number] : self.bounds[number + 1]].tolist()

    def __len__(self) -> int:
        count = len(self.bounds) - 1
        return count if self.rank is None else count // self.num_replicas


class SharedEpoch(TorchDataset):
    """A training set and its `MaxTokensBatchSampler` with one epoch between them: the dataset a token-batch loader
    holds, so that the epoch reaches the batches' shuffle and the dataset's own draws (`Resegmented`) alike.

    Accelerate's loader hands its epoch to the dataset only where it finds no sampler to hand it to
    (`DataLoaderShard.set_epoch`'s `elif`), and the wrappers it and the Trainer put around the batch sampler hide it
    in some runs and not in others (`BatchSamplerShard` for several processes, `SkipBatchSampler` for a resumed
    epoch): the sampler must not be found, and the dataset's `set_epoch` sets both."""

    def __init__(self, dataset, sampler: MaxTokensBatchSampler):
        self.dataset, self.sampler = dataset, sampler

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> list:
        """A batch in one call where the dataset reads one so (a `datasets.Dataset`), as torch's loader would."""
        fetch = getattr(self.dataset, "__getitems__", None)
        return fetch(indices) if fetch is not None else [self.dataset[index] for index in indices]


def check_buckets(buckets: Sequence[int], longest: int, max_tokens: int | None) -> None:
    """ValueError naming what is wrong with `length_buckets`: ascending positive lengths, the last holding the
    longest example, none over the token budget."""
    values = list(buckets)
    if not values or any(not isinstance(b, int) or b < 1 for b in values) or values != sorted(set(values)):
        raise ValueError(f"length_buckets must be ascending positive token counts, got {values}")
    if values[-1] < longest:
        raise ValueError(f"length_buckets' last ({values[-1]}) must hold the longest example ({longest} tokens)")
    if max_tokens is not None and values[-1] > max_tokens:
        raise ValueError(f"length_buckets' last ({values[-1]}) is over max_tokens={max_tokens}")


class BucketPadding:
    """A collator's batches padded on to the first of `buckets` that holds their longest side: source and target
    (input_ids, attention_mask, labels, decoder_input_ids) to one length, so that with `MaxTokensBatchSampler`'s
    bucketed batches a step has few shapes. Padding is masked (pad ids, mask 0, labels -100): losses are unchanged."""

    def __init__(self, collator, buckets: Sequence[int], pad_token_id: int):
        self.collator, self.buckets, self.pad = collator, list(buckets), pad_token_id

    def __call__(self, features):
        import torch

        batch = self.collator(features)
        width = max(batch[key].shape[1] for key in ("input_ids", "labels") if key in batch)
        length = int(bucket_of([width], self.buckets)[0])
        fills = {"input_ids": self.pad, "attention_mask": 0, "labels": -100, "decoder_input_ids": self.pad}
        for key, fill in fills.items():
            if key in batch and batch[key].shape[1] < length:
                extra = batch[key].new_full((batch[key].shape[0], length - batch[key].shape[1]), fill)
                batch[key] = torch.cat([batch[key], extra], dim=1)
        return batch


def padding_fraction(
    batches: Sequence[Sequence[int]], source_lengths: Sequence[int], target_lengths: Sequence[int]
) -> float:
    """Share of padding among all token slots when each side of each batch is padded to its longest sentence."""
    padded = real = 0
    for batch in batches:
        for lengths in (source_lengths, target_lengths):
            batch_lengths = [lengths[i] for i in batch]
            padded += len(batch) * max(batch_lengths)
            real += sum(batch_lengths)
    return 1 - real / padded
