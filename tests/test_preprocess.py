"""tokenize_dataset: ids end in </s>, length limits truncate or drop, empty pairs go, results are cached."""

from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict, IterableDataset

from aayn.data import load_translation_dataset, tokenize_dataset, train_tokenizer

ROWS = [
    ("The cat sat on the mat.", "Le chat était assis sur le tapis."),
    ("", "Une phrase sans source."),
    ("A sentence without a target.", "   "),
    ("A long sentence " * 20, "Une longue phrase " * 20),
    ("Short.", "Court."),
]


def corpus(rows=ROWS) -> Dataset:
    return Dataset.from_list([{"translation": {"en": en, "fr": fr}} for en, fr in rows])


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(corpus(ROWS * 20), source_lang="en", target_lang="fr", vocab_size=300, show_progress=False)


def test_truncates_keeping_eos_and_drops_empty_pairs(tokenizer):
    out = tokenize_dataset(
        corpus(), tokenizer, source_lang="en", target_lang="fr", max_source_length=8, max_target_length=6
    )
    assert out.column_names == ["input_ids", "attention_mask", "labels"]
    assert len(out) == 3  # the two pairs with an empty side are gone
    for row in out:
        assert len(row["input_ids"]) <= 8 and len(row["labels"]) <= 6
        assert row["input_ids"][-1] == row["labels"][-1] == tokenizer.eos_token_id
        assert row["attention_mask"] == [1] * len(row["input_ids"])
    assert out[0]["input_ids"] == tokenizer(ROWS[0][0], max_length=8, truncation=True)["input_ids"]


def test_drop_removes_over_long_pairs_instead(tokenizer):
    out = tokenize_dataset(
        corpus(),
        tokenizer,
        source_lang="en",
        target_lang="fr",
        max_source_length=40,
        max_target_length=40,
        overlong="drop",
    )
    assert len(out) == 2
    assert tokenizer.decode(out[1]["labels"], skip_special_tokens=True) == "Court."


def test_splits_of_a_dataset_dict_and_source_target_order(tokenizer):
    data = DatasetDict(train=corpus(), test=corpus(ROWS[:1]))
    out = tokenize_dataset(data, tokenizer, source_lang="fr", target_lang="en")
    assert {name: len(split) for name, split in out.items()} == {"train": 3, "test": 1}
    assert tokenizer.decode(out["test"][0]["input_ids"], skip_special_tokens=True) == ROWS[0][1]


def test_cached_and_parallel_results_are_identical(tokenizer, tmp_path):
    for split in ("train", "validation", "test"):  # 20,000 pairs: two worker processes' worth
        (tmp_path / f"{split}.en").write_text("".join(f"{en}\n" for en, _ in ROWS * 4000), encoding="utf-8")
        (tmp_path / f"{split}.fr").write_text("".join(f"{fr}\n" for _, fr in ROWS * 4000), encoding="utf-8")
    data = load_translation_dataset(str(tmp_path), source_lang="en", target_lang="fr")
    first = tokenize_dataset(data, tokenizer, source_lang="en", target_lang="fr")
    again = tokenize_dataset(data, tokenizer, source_lang="en", target_lang="fr")
    assert first["train"].cache_files and first["train"].cache_files == again["train"].cache_files  # loaded, not redone
    names = {split: str(tmp_path / f"parallel-{split}.arrow") for split in data}
    parallel = tokenize_dataset(data, tokenizer, source_lang="en", target_lang="fr", num_proc=2, cache_file_names=names)
    assert [Path(f["filename"]).name for f in parallel["train"].cache_files] == [
        "parallel-train_00000_of_00002.arrow",
        "parallel-train_00001_of_00002.arrow",
    ]  # one file per worker process
    assert parallel["train"][:] == first["train"][:]


def test_streaming_rows_are_checked_as_they_pass(tokenizer):
    def rows():
        yield {"translation": {"en": "Short.", "fr": "Court."}}
        yield {"translation": {"en": "No French here."}}

    out = tokenize_dataset(IterableDataset.from_generator(rows), tokenizer, source_lang="en", target_lang="fr")
    with pytest.raises(ValueError, match="a row of the dataset has no 'fr' text"):
        list(out)


def test_bad_arguments_are_named(tokenizer):
    with pytest.raises(ValueError, match="overlong='cut'; allowed: truncate, drop"):
        tokenize_dataset(corpus(), tokenizer, source_lang="en", target_lang="fr", overlong="cut")
    with pytest.raises(ValueError, match="max_target_length must be an integer >= 2"):
        tokenize_dataset(corpus(), tokenizer, source_lang="en", target_lang="fr", max_target_length=1)
