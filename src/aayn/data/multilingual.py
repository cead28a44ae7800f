"""Several language pairs in one model (Johnson et al. 2017, TACL): the target language's token (`>>fr<<`, as
OPUS-MT writes it) before each source, one vocabulary shared by every language, the pairs mixed by temperature.

A recipe names its pairs (`lang_pairs: en-es,en-fr,en-it`). Each pair is prepared once, as one pair is
(`aayn.data.prepare`: its own folder, keyed by its data, the shared tokenizer and its target token), so that a
rerun reads no corpus and, with the vocabulary given (`tokenizer_name`), adding a pair prepares only that pair; a
new vocabulary is trained on all the pairs, so a new pair changes it and the pairs are prepared again. The
training split is the pairs' prepared splits side by side (memory-mapped, no copy), with the examples of pair i
drawn `count_i` times in all, `count_i / sum(count) = p_i`, `p_i ∝ size_i^(1/T)` (fairseq's `--sampling-method
temperature`: T=1 proportional to the data, a large T uniform over the pairs), and `sum(count)` the pairs' total
size: a small pair's examples repeated, a large pair's sampled down, by a draw from the run's seed, which every
process makes the same. Validation and test hold every pair whole, side by side, each row's pair known
(`MultilingualData.rows`), so that BLEU is scored per pair.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from datasets import Dataset, DatasetDict, concatenate_datasets

from ..languages import language_token, pair_name, source_language_token


def temperature_probabilities(sizes, temperature: float) -> np.ndarray:
    """p_i ∝ size_i^(1/T): each pair's share of the training examples."""
    sizes = np.asarray(sizes, dtype=np.float64)
    if not temperature > 0:
        raise ValueError(f"sampling_temperature must be positive (1: as the data); got {temperature}")
    if len(sizes) == 0 or (sizes <= 0).any():
        raise ValueError(f"every pair needs training examples; sizes {sizes.astype(int).tolist()}")
    weights = (sizes / sizes.sum()) ** (1.0 / temperature)
    return weights / weights.sum()


def mixture_counts(sizes, temperature: float) -> np.ndarray:
    """How many examples of each pair one pass over the training split holds: the pairs' total, shared by
    `temperature_probabilities` (the largest remainders rounded up), every pair at least one."""
    sizes = np.asarray(sizes, dtype=np.int64)
    shares = temperature_probabilities(sizes, temperature) * sizes.sum()
    counts = np.maximum(np.floor(shares).astype(np.int64), 1)
    for i in np.argsort(-(shares - np.floor(shares)), kind="stable")[: max(0, int(sizes.sum() - counts.sum()))]:
        counts[i] += 1
    return counts


def mixture_indices(sizes, temperature: float, seed: int) -> np.ndarray:
    """The rows of the pairs side by side that one pass over the training split holds, pair after pair: a pair
    drawn `count` times of `size` holds each of its examples `count // size` times and `count % size` of them,
    drawn without replacement, once more (a sample without replacement where it is cut down)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    parts = []
    for offset, size, count in zip(offsets, sizes, mixture_counts(sizes, temperature)):
        whole, rest = divmod(int(count), int(size))
        rows = np.concatenate([np.tile(np.arange(size), whole), np.sort(rng.choice(size, rest, replace=False))])
        parts.append(offset + rows)
    return np.concatenate(parts)


@dataclass
class MultilingualData:
    """The pairs' prepared data as one run reads it: `splits` side by side (the training split mixed), `rows`
    each evaluation split's pair per row, in order."""

    pairs: list[tuple[str, str]]
    splits: DatasetDict
    rows: dict[str, list[str]]
    sizes: dict[str, dict[str, int]]  # split -> pair -> prepared examples


def side_by_side(pairs, prepared: list[DatasetDict], temperature: float, seed: int) -> MultilingualData:
    """The pairs' prepared splits (one DatasetDict a pair, the same splits each) as one run's: see the module."""
    names = [pair_name(pair) for pair in pairs]
    splits, rows, sizes = {}, {}, {}
    for split in prepared[0]:
        parts = [data[split] for data in prepared]
        sizes[split] = {name: len(part) for name, part in zip(names, parts)}
        if split == "train":
            empty = [name for name, part in zip(names, parts) if len(part) == 0]
            if empty:
                raise ValueError(f"lang_pairs: {empty[0]} has no training pair left after preparation")
            order = mixture_indices([len(part) for part in parts], temperature, seed)
            splits[split] = concatenate_datasets(parts).select(order)
        else:
            splits[split] = concatenate_datasets(parts)
            rows[split] = [name for name, part in zip(names, parts) for _ in range(len(part))]
    return MultilingualData(list(pairs), DatasetDict(splits), rows, sizes)


def tokenizer_sample(pairs, trains: list[Dataset], temperature: float, input_sentence_size: int, seed: int) -> Dataset:
    """The pairs a shared vocabulary reads, both sides of each, under one schema (`source`, `target`): the
    temperature mixture of the training splits (so a small pair's language is not drowned), cut to
    `input_sentence_size / 2` pairs where that is smaller (0: the whole mixture)."""
    order = mixture_indices([len(train) for train in trains], temperature, seed)
    if input_sentence_size and len(order) > input_sentence_size // 2:
        order = np.sort(np.random.default_rng(seed).choice(order, max(1, input_sentence_size // 2), replace=False))
    offsets = np.concatenate([[0], np.cumsum([len(train) for train in trains])])
    rows = []
    for i, (pair, train) in enumerate(zip(pairs, trains)):
        chosen = order[(order >= offsets[i]) & (order < offsets[i + 1])] - offsets[i]
        for row in train.select(chosen)["translation"]:
            rows.append({"source": row[pair[0]], "target": row[pair[1]]})
    return Dataset.from_dict({"translation": rows})


def language_tokens_of(pairs, source_tokens: bool = False) -> tuple[str, ...]:
    """The tokens a shared vocabulary holds for `pairs`: each target's `>>xx<<`, and each source's `__xx__`."""
    tokens = [language_token(target) for _, target in pairs]
    tokens += [source_language_token(source) for source, _ in pairs] if source_tokens else []
    return tuple(dict.fromkeys(tokens))


def with_prefix(plan, pair, limit: int | None = None, source_token: bool = False):
    """The pair's `DataPlan` (from the run's), its sources prefixed by the target's token (and the source's, after
    it, with `source_token`: fairseq's `--encoder-langtok src`); `limit`: its first `limit` training pairs only
    (`en-pt:2000` in `lang_pairs`)."""
    prefix = f"{language_token(pair[1])} " + f"{source_language_token(pair[0])} " * source_token
    samples = plan.max_samples if limit is None else {**plan.max_samples, "train": limit}
    return dataclasses.replace(plan, source_lang=pair[0], target_lang=pair[1], source_prefix=prefix,
                               max_samples=samples)  # fmt: skip


def prepare_multilingual(
    plan,
    pairs: list[tuple[str, str]],
    splits: list[str],
    *,
    temperature: float,
    limits: dict | None = None,
    seed: int,
    tokenizer=None,
    num_proc: int | None = None,
    root=None,
    source_tokens: bool = False,
):
    """(PreparedData of the run, MultilingualData): each pair prepared once (`aayn.data.prepare`) with one
    tokenizer, `tokenizer` or a new one shared by every language (`shared_tokenizer`), then side by side;
    `source_tokens`: each source led by its language's token too."""
    from .prepare import PreparedData, cache_root, prepare_data

    root = root or cache_root()
    plans = [with_prefix(plan, pair, (limits or {}).get(pair), source_tokens) for pair in pairs]
    new_tokenizer = tokenizer is None
    if tokenizer is None and plan.tokenizer_name:
        from transformers import AutoTokenizer

        tokenizer, new_tokenizer = AutoTokenizer.from_pretrained(plan.tokenizer_name), False
    if tokenizer is None:
        tokenizer = shared_tokenizer(plans, pairs, splits, temperature, seed, root, source_tokens)
    missing = [token for token in language_tokens_of(pairs, source_tokens) if token not in tokenizer.get_vocab()]
    if missing:
        raise ValueError(f"lang_pairs: the tokenizer has no token {missing[0]} (a multilingual model's vocabulary "
                         "holds each target's; leave tokenizer_name out to train one)")  # fmt: skip
    prepared = [prepare_data(one, splits, tokenizer=tokenizer, num_proc=num_proc, root=root) for one in plans]
    data = side_by_side(pairs, [one.splits for one in prepared], temperature, seed)
    return PreparedData(prepared[0].folder, tokenizer, data.splits, new_tokenizer), data


def shared_tokenizer(plans, pairs, splits, temperature: float, seed: int, root, source_tokens: bool = False):
    """One vocabulary for every language of `pairs` (a byte-level BPE, or a SentencePiece model with
    `tokenizer_type: sentencepiece`), with each target's token (and each source's), trained once per data and
    settings on `tokenizer_sample` (a folder under the cache, as a one-pair vocabulary)."""
    from transformers import AutoTokenizer

    from ..folders import staged_folder
    from ..model.policy_aayn import TOKENIZER_TYPE
    from .prepare import FORMAT, RECORD, is_recorded, say_what_changed, split_identities, text_digest, write_record
    from .tokenizer import save_tokenizer, train_vocabulary

    first = plans[0]
    if "train" not in splits:
        raise ValueError("a new shared vocabulary is trained on the train split; give --tokenizer_name to test")
    loaded = {}

    def raw(i):
        if i not in loaded:
            loaded[i] = plans[i].load(["train"])
        return loaded[i]

    identities = [split_identities(p, ["train"], lambda i=i: raw(i))["train"] for i, p in enumerate(plans)]
    parts = {
        "format": FORMAT,
        "data": {
            pair_name(pair): [p.splits["train"], p.max_samples.get("train"), identity]
            for pair, p, identity in zip(pairs, plans, identities)
        },
        "vocab_size": first.vocab_size,
        "input_sentence_size": first.input_sentence_size,
        "sampling_temperature": temperature,
        "seed": seed,
    } | ({"source_tokens": True} if source_tokens else {})  # (a folder without them predates the choice)
    if first.tokenizer_type != TOKENIZER_TYPE:  # (as the one-pair key: a byte-level BPE's predates the choice)
        parts["tokenizer_type"] = f"{first.tokenizer_type} {first.sentencepiece_model_type}"
    name = "multi-" + "_".join(pair_name(pair) for pair in pairs)[:60]
    folder = root / f"bpe-{name}-{text_digest(parts)[:16]}"
    if not (folder / RECORD).is_file():
        say_what_changed(root, f"bpe-{name}-", parts)
        trains = [raw(i)["train"] for i in range(len(plans))]
        sample = tokenizer_sample(pairs, trains, temperature, first.input_sentence_size, seed)
        tokenizer = train_vocabulary(
            sample, tokenizer_type=first.tokenizer_type, sentencepiece_model_type=first.sentencepiece_model_type,
            source_lang="source", target_lang="target", vocab_size=first.vocab_size,
            language_tokens=language_tokens_of(pairs, source_tokens), seed=seed,
        )  # fmt: skip
        with staged_folder(folder, finished_by_another=is_recorded) as staging:
            save_tokenizer(tokenizer, staging)
            write_record(staging, parts, first)
    return AutoTokenizer.from_pretrained(folder)
