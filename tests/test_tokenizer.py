"""train_tokenizer: a shared BPE whose ids match the model config, that round-trips text and loads without aayn."""

import logging
import os
import subprocess
import sys
import tracemalloc
import unicodedata

import pytest
from datasets import Dataset, IterableDataset

from aayn import AaynConfig
from aayn.data import load_translation_dataset, train_tokenizer

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)

SENTENCES = [
    ("The cat sat on the mat.", "Le chat était assis sur le tapis."),
    ("Two  spaces,\ttabs and a trailing space ", "Deux  espaces,\ttabulations et une espace finale "),
    ("Full-width ＡＢＣ and the ligature ﬁ normalize.", "Les ligatures ﬁ et l'ellipse … se normalisent."),
    ("Numbers 1,234.5 and emoji 🙂 survive.", "Les nombres 1 234,5 et l'emoji 🙂 survivent."),
] * 50


def small_corpus() -> Dataset:
    return Dataset.from_list([{"translation": {"en": en, "fr": fr}} for en, fr in SENTENCES])


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(small_corpus(), source_lang="en", target_lang="fr", vocab_size=400, show_progress=False)


def test_special_token_ids_match_the_model_config(tokenizer):
    config = AaynConfig()
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        config.pad_token_id,
        config.bos_token_id,
        config.eos_token_id,
    )
    assert config.decoder_start_token_id == tokenizer.bos_token_id and tokenizer.unk_token_id == 3


def test_eos_is_appended_to_inputs_and_labels(tokenizer):
    encoded = tokenizer(["The cat.", "Two dogs sat."], text_target=["Le chat.", "Deux chiens."])
    assert set(encoded) == {"input_ids", "attention_mask", "labels"}
    for ids in encoded["input_ids"] + encoded["labels"]:
        assert ids[-1] == tokenizer.eos_token_id and tokenizer.eos_token_id not in ids[:-1]
        assert tokenizer.bos_token_id not in ids  # the decoder start is added by shifting labels, not here


def test_decoding_restores_the_nfkc_text_and_spacing(tokenizer):
    for en, fr in SENTENCES[:4]:
        for text in (en, fr):
            ids = tokenizer(text)["input_ids"]
            assert tokenizer.decode(ids, skip_special_tokens=True) == unicodedata.normalize("NFKC", text)
    assert tokenizer.unk_token_id not in tokenizer("Unseen script: 漢字 ქართული")["input_ids"]  # byte-level: no unk


def test_newstest2014_round_trips(wmt14_mini):
    data = load_translation_dataset(str(wmt14_mini), source_lang="en", target_lang="de")
    tokenizer = train_tokenizer(data["train"], source_lang="en", target_lang="de", vocab_size=8000, show_progress=False)
    texts = [row["translation"][lang] for row in data["test"] for lang in ("en", "de")]
    decoded = tokenizer.batch_decode(tokenizer(texts)["input_ids"], skip_special_tokens=True)
    exact = sum(d == unicodedata.normalize("NFKC", t) for d, t in zip(decoded, texts)) / len(texts)
    assert exact >= 0.99


def test_saved_tokenizer_loads_with_auto_tokenizer_without_aayn(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    text = SENTENCES[1][0]
    script = (
        "import sys; from transformers import AutoTokenizer\n"
        f"t = AutoTokenizer.from_pretrained({str(tmp_path)!r})\n"
        f"print(t({text!r})['input_ids'], t.pad_token_id, t.eos_token_id)\n"
        "assert 'aayn' not in sys.modules\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.split("]")[0] + "]" == str(tokenizer(text)["input_ids"])
    assert result.stdout.split("]")[1].split() == ["0", "2"]


def peak_python_memory(pairs: int) -> int:
    def rows():
        for i in range(pairs):
            yield {
                "translation": {"en": f"sentence number {i} about the weather", "fr": f"phrase numéro {i} sur le temps"}
            }

    tracemalloc.start()
    tokenizer = train_tokenizer(
        IterableDataset.from_generator(rows), source_lang="en", target_lang="fr", vocab_size=500, show_progress=False
    )
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(tokenizer) == 500
    return peak


def test_streams_the_corpus_and_reports_throughput(caplog):
    """Read from an iterable in batches: Python memory does not grow with the corpus (4x the pairs, same peak)."""
    with caplog.at_level(logging.INFO, logger="aayn"):
        small, large = peak_python_memory(10_000), peak_python_memory(40_000)
    assert large < 1.2 * small and large < 40_000 * 70 / 2  # well under the 2.8 MB of text
    assert "on 80,000 sentences" in caplog.text and "sentences/s" in caplog.text


def test_bad_arguments():
    with pytest.raises(ValueError, match="vocab_size=100 is too small"):
        train_tokenizer(small_corpus(), source_lang="en", target_lang="fr", vocab_size=100)
    with pytest.raises(ValueError, match="needs a split with a `translation` column"):
        train_tokenizer(Dataset.from_dict({"text": ["a"]}), source_lang="en", target_lang="fr")
    with pytest.raises(ValueError, match="'de' is not a language of the corpus; its languages: en, fr"):
        train_tokenizer(small_corpus(), source_lang="de", target_lang="fr")
