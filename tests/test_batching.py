"""MaxTokensBatchSampler: the invariants a trainer relies on, checked directly on many random corpora."""

import numpy as np
import pytest

from aayn.data import MaxTokensBatchSampler, padding_fraction
from aayn.data.token_batches import decoding_batches


def corpus(seed: int, size: int) -> list[int]:
    """Sentence lengths shaped like real text: log-normal, 1 to 200 tokens."""
    return np.clip(np.random.default_rng(seed).lognormal(3.2, 0.6, size).astype(int), 1, 200).tolist()


@pytest.mark.parametrize(
    "seed, size, max_tokens, replicas",
    [(0, 1000, 2000, 1), (1, 777, 500, 2), (2, 50, 400, 3), (3, 5000, 25000, 4), (4, 9, 200, 2)],
)
def test_budget_exactly_once_and_disjoint_equal_shards(seed, size, max_tokens, replicas):
    lengths = corpus(seed, size)
    for epoch in range(3):
        shards = []
        for rank in range(replicas):
            sampler = MaxTokensBatchSampler(lengths, max_tokens, seed=seed, num_replicas=replicas, rank=rank)
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
            assert len(shards[-1]) == len(sampler)
        assert len({len(shard) for shard in shards}) == 1  # lock-step data parallelism
        batches = [batch for shard in shards for batch in shard]
        assert all(len(batch) * max(lengths[i] for i in batch) <= max_tokens for batch in batches)
        seen = sorted(i for batch in batches for i in batch)
        assert seen == list(range(size))  # every example once: shards are disjoint and cover the corpus


def test_deterministic_under_a_seed_and_shuffled_per_epoch():
    lengths = corpus(0, 2000)

    def epoch_batches(seed, epoch):
        sampler = MaxTokensBatchSampler(lengths, 3000, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert epoch_batches(7, 0) == epoch_batches(7, 0)
    assert epoch_batches(7, 0) != epoch_batches(7, 1)  # a new order each epoch...
    assert sorted(map(sorted, epoch_batches(7, 0))) == sorted(map(sorted, epoch_batches(7, 1)))  # ...same batches
    assert epoch_batches(7, 0) != epoch_batches(8, 0)
    unshuffled = MaxTokensBatchSampler(lengths, 3000, shuffle=False)
    firsts = [lengths[batch[0]] for batch in unshuffled]
    assert firsts == sorted(firsts)
    # what translating decodes: the unshuffled batches, a sentence over the budget alone in its batch
    longer = [*lengths, 5000, 3001]
    batches = decoding_batches(longer, 3000)
    assert batches == list(MaxTokensBatchSampler([min(n, 3000) for n in longer], 3000, shuffle=False))
    assert [len(lengths)] in batches and [len(lengths) + 1] in batches


def test_length_grouping_beats_random_batches_of_the_same_size():
    lengths = corpus(5, 5000)
    batches = list(MaxTokensBatchSampler(lengths, 4000, seed=0))
    size = round(len(lengths) / len(batches))
    order = np.random.default_rng(0).permutation(len(lengths)).tolist()
    random_batches = [order[i : i + size] for i in range(0, len(order), size)]
    assert padding_fraction(batches, lengths, lengths) < 0.05 < padding_fraction(random_batches, lengths, lengths)


def test_padding_fraction_by_hand():
    # batch [0, 1]: source 2 + 4 in 2 x 4 slots, target 3 + 3 in 2 x 3; batch [2]: no padding (1 + 1 in 1 + 1)
    assert padding_fraction([[0, 1], [2]], [2, 4, 1], [3, 3, 1]) == pytest.approx(1 - 14 / 16)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"example 1 is 300 tokens long, more than max_tokens=256"):
        MaxTokensBatchSampler([10, 300, 20], 256)
    with pytest.raises(ValueError, match="max_tokens must be positive"):
        MaxTokensBatchSampler([10], 0)
    with pytest.raises(ValueError, match=r"rank must be in \[0, num_replicas=2\), got 2"):
        MaxTokensBatchSampler([10, 10], 100, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="3 examples cannot feed num_replicas=4"):
        MaxTokensBatchSampler([10, 10, 10], 100, num_replicas=4)
    with pytest.raises(ValueError, match="cannot be dealt evenly to 2 replicas"):
        MaxTokensBatchSampler([10, 10, 10], 10, num_replicas=2)


def test_rank_none_interleaves_the_shards_for_a_dealing_loader():
    """Accelerate's BatchSamplerShard deals batch i to process i % world: that must reproduce each rank's shard."""
    lengths = corpus(9, 500)
    everything = MaxTokensBatchSampler(lengths, 800, seed=3, num_replicas=3, rank=None)
    everything.set_epoch(2)
    dealt = list(everything)
    assert len(dealt) == len(everything) and len(dealt) % 3 == 0
    for rank in range(3):
        shard = MaxTokensBatchSampler(lengths, 800, seed=3, num_replicas=3, rank=rank)
        shard.set_epoch(2)
        assert dealt[rank::3] == list(shard)


def reference_batches(lengths, max_tokens, seed, replicas, epoch):
    """The sampler as it was written first: a Python loop over examples and lists of lists, the greedy cut spelled
    out (kept here as the reference the vectorized sampler must equal, batch for batch)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    tie_break = np.random.default_rng(seed).permutation(len(lengths))
    order = tie_break[np.argsort(lengths[tie_break], kind="stable")]
    batches, batch, longest = [], [], 0
    for index in order.tolist():
        if batch and (len(batch) + 1) * max(longest, int(lengths[index])) > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(index)
        longest = max(longest, int(lengths[index]))
    batches.append(batch)
    while len(batches) % replicas:
        largest = max(range(len(batches)), key=lambda i: (len(batches[i]), -i))
        batch = batches.pop(largest)
        batches[largest:largest] = [batch[: len(batch) // 2], batch[len(batch) // 2 :]]
    permutation = np.random.default_rng(seed + epoch).permutation(len(batches))
    return [batches[i] for i in permutation]


@pytest.mark.parametrize(
    "seed, size, max_tokens, replicas",
    [(0, 3000, 2000, 1), (1, 777, 500, 3), (2, 50, 400, 2), (3, 20000, 25000, 8), (4, 9, 200, 2), (5, 4000, 200, 1)],
)
def test_batches_equal_the_reference_greedy_loop(seed, size, max_tokens, replicas):
    lengths = corpus(seed, size)
    for epoch in (0, 1):
        sampler = MaxTokensBatchSampler(
            np.asarray(lengths, dtype=np.uint16), max_tokens, seed=seed, num_replicas=replicas, rank=None
        )
        sampler.set_epoch(epoch)
        assert list(sampler) == reference_batches(lengths, max_tokens, seed, replicas, epoch)


def bible_lengths() -> np.ndarray:
    """max(source, target) tokens per pair of the demo data's training split, as its 4,000-piece BPE cuts them (about
    1.4 pieces a word; no tokenizer trained here)."""
    from aayn.data import load_translation_dataset

    pairs = load_translation_dataset("bible", source_lang="en", target_lang="fr")["train"]["translation"]
    return np.array([min(128, round(1.4 * max(len(p["en"].split()), len(p["fr"].split()))) + 1) for p in pairs])


def test_length_buckets_give_a_step_few_shapes_over_the_demo_data():
    """With `length_buckets`, each batch is one bucket's (`max_tokens // bucket` sentences but the bucket's last),
    so over an epoch of the demo's data a padded step has at most two shapes a bucket, where plain max-tokens
    batches have one per longest length; every example still in exactly one batch, each within the budget."""
    from aayn.data.token_batches import bucket_of

    lengths, budget, buckets = bible_lengths(), 1024, [16, 24, 32, 48, 64, 96, 128]
    bucketed = MaxTokensBatchSampler(lengths, budget, buckets=buckets, seed=1)
    shapes = {(len(b), int(bucket_of([lengths[b].max()], buckets)[0])) for b in bucketed}
    assert len(shapes) <= 2 * len(buckets)
    for batch in bucketed:
        bucket = int(bucket_of([lengths[batch].max()], buckets)[0])
        assert len(batch) * bucket <= budget and len(set(bucket_of(lengths[batch], buckets).tolist())) == 1
    assert sorted(i for b in bucketed for i in b) == list(range(len(lengths)))
    plain = {(len(b), int(lengths[b].max())) for b in MaxTokensBatchSampler(lengths, budget, seed=1)}
    assert len(plain) > 4 * len(shapes), (len(plain), len(shapes))  # 69 and 13


def test_bucket_padding_leaves_the_loss_as_it_was(tmp_path):
    """A batch padded on to its bucket (source and target: pad ids, mask 0, labels -100) gives the loss and the
    gradients of the same batch padded to its longest sentence."""
    import torch
    from transformers import DataCollatorForSeq2Seq

    from aayn import AaynConfig, AaynForConditionalGeneration
    from aayn.data.batching import BucketPadding

    config = AaynConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, dropout=0.0,
                        label_smoothing=0.1, pad_token_id=1, eos_token_id=2, bos_token_id=0,
                        decoder_start_token_id=2)  # fmt: skip
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(config)

    class Pad:
        pad_token_id, padding_side = 1, "right"

        def pad(self, features, **kwargs):  # what DataCollatorForSeq2Seq asks of a tokenizer
            width = max(len(f["input_ids"]) for f in features)
            ids = [f["input_ids"] + [1] * (width - len(f["input_ids"])) for f in features]
            mask = [[1] * len(f["input_ids"]) + [0] * (width - len(f["input_ids"])) for f in features]
            return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}

    features = [{"input_ids": [5, 6, 7, 2], "labels": [8, 9, 2]}, {"input_ids": [5, 2], "labels": [9, 10, 11, 2]}]
    plain = DataCollatorForSeq2Seq(Pad(), model=model, label_pad_token_id=-100)
    bucketed = BucketPadding(plain, [8, 16], pad_token_id=1)
    results = []
    for collate in (plain, bucketed):
        batch = collate([dict(f) for f in features])
        model.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        results.append((batch["input_ids"].shape, loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (shape, loss, grads), (bucket_shape, bucket_loss, bucket_grads) = results
    assert tuple(shape) == (2, 4) and tuple(bucket_shape) == (2, 8)
    torch.testing.assert_close(bucket_loss, loss)
    for a, b in zip(bucket_grads, grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    ("buckets", "message"),
    [([16, 8], "ascending positive"), ([8, 0], "ascending positive"), ([4], "must hold the longest example"),
     ([8, 4096], "is over max_tokens=1024")],
)  # fmt: skip
def test_bad_length_buckets_are_named(buckets, message):
    with pytest.raises(ValueError, match=message):
        MaxTokensBatchSampler([3, 5, 7], 1024, buckets=buckets)


def test_the_loaders_dataset_hands_its_epoch_to_the_sampler_and_the_draws_and_fetches_as_the_dataset():
    """`SharedEpoch`, the dataset a token-batch loader holds, in each way Accelerate's loader reaches it: its
    `set_epoch` sets the sampler's shuffle and the wrapped dataset's epoch (catches either left out); torch's loader
    reads a batch through `__getitems__` where the dataset has one (a `datasets.Dataset`) and item by item
    otherwise, the same rows (catches a batch fetched out of order); it is as long as the dataset, and is no batch
    sampler Accelerate would hand the epoch to instead (catches `MaxTokensBatchSampler.sampler` given back)."""
    from torch.utils.data import DataLoader

    from aayn.data.batching import SharedEpoch

    class Drawn:  # a dataset whose rows depend on its epoch, as `Resegmented`'s do
        epoch = 0

        def set_epoch(self, epoch):
            self.epoch = epoch

        def __len__(self):
            return 40

        def __getitem__(self, index):
            return {"input_ids": [index, self.epoch]}

    class Batched(Drawn):
        def __getitems__(self, indices):
            return [self[index] for index in indices]

    lengths = list(range(1, 41))
    for dataset in (Drawn(), Batched()):
        sampler = MaxTokensBatchSampler(lengths, 200, seed=2)
        shared = SharedEpoch(dataset, sampler)
        assert len(shared) == 40 and not hasattr(sampler, "sampler")
        loader = DataLoader(shared, batch_sampler=sampler, collate_fn=lambda rows: rows)
        first = [[row["input_ids"] for row in batch] for batch in loader]
        shared.set_epoch(3)
        assert (sampler.epoch, dataset.epoch) == (3, 3)
        again = [[row["input_ids"] for row in batch] for batch in loader]
        assert all(epoch == 3 for batch in again for _, epoch in batch)
        assert [[i for i, _ in batch] for batch in again] == list(sampler) != [[i for i, _ in b] for b in first]
