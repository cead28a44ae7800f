"""SentencePiece as a tokenizer kind (`tokenizer_type: sentencepiece`): trained with the sentencepiece library on the
sample a BPE reads, it segments exactly as sentencepiece's own processor does (the independent reference), saves
as tokenizer.json + sentencepiece.model, and runs, reruns and `--tokenizer_name` find their prepared data."""

import json
import os
import re
import subprocess
import sys

import datasets
import pytest
from training_helpers import FAST, tiny_recipe, write_numbers_corpus, write_recipe

from aayn.cli import main
from aayn.data import load_translation_dataset
from aayn.data.tokenizer import SENTENCEPIECE_FILE, train_sentencepiece

sentencepiece = pytest.importorskip("sentencepiece")

ODD = ["  Two  spaces and a trailing one ", "x", "", "Ça va ? « Oui » — 12,5 %", "tab\there", "ﬁ ligature ①", "漢字"]


@pytest.fixture(scope="module")
def bible():
    data = load_translation_dataset("bible", source_lang="en", target_lang="fr")
    return data["train"].select(range(3000)), data["test"].select(range(150))


@pytest.mark.both_lines
@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_ids_and_text_equal_sentencepiece_s_own_processor(bible, model_type):
    train, test = bible
    tokenizer = train_sentencepiece(train, source_lang="en", target_lang="fr", vocab_size=800, model_type=model_type)
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.sentencepiece_model)
    assert [processor.id_to_piece(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (
        0, 1, 2, 3
    )  # fmt: skip
    texts = [row[lang] for row in test["translation"] for lang in ("en", "fr")] + ODD
    for text in texts:
        assert tokenizer(text)["input_ids"] == processor.encode(text) + [2], text
        assert tokenizer(text_target=text)["input_ids"] == processor.encode(text) + [2], text
    for text in texts[: -len(ODD)]:  # text with no unknown character: decoding gives sentencepiece's text back
        assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == processor.decode(
            processor.encode(text)
        )


@pytest.mark.both_lines
def test_the_sample_decides_the_model(bible, caplog):
    """Both sides of a seeded sample of input_sentence_size / 2 pairs, as the BPE reads: the same model again."""
    train, _ = bible
    options = dict(source_lang="en", target_lang="fr", vocab_size=600, input_sentence_size=2000)
    with caplog.at_level("INFO", logger="aayn"):
        first = train_sentencepiece(train, **options)
    assert "training the vocabulary on 1,000 of 3,000 pairs" in caplog.text and "on 2,000 sentences" in caplog.text
    assert train_sentencepiece(train, **options).sentencepiece_model == first.sentencepiece_model
    assert train_sentencepiece(train, **{**options, "seed": 1}).sentencepiece_model != first.sentencepiece_model


@pytest.mark.both_lines
def test_bad_settings_are_named(bible):
    train, _ = bible
    with pytest.raises(ValueError, match="sentencepiece_model_type='word'"):
        train_sentencepiece(train, source_lang="en", target_lang="fr", model_type="word")
    small = train_sentencepiece(train.select(range(50)), source_lang="en", target_lang="fr", vocab_size=5000)
    assert 100 < len(small) < 5000  # as a BPE: fewer pieces where the sample has fewer (said in a warning)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    return tmp_path / "hf-cache" / "aayn"


def test_a_run_carries_the_model_and_reruns_find_its_data(tmp_path, cache, caplog, capsys):
    """`aayn preprocess` then `aayn train` with `tokenizer_type: sentencepiece`: the run's folder (and each
    checkpoint) carries sentencepiece.model beside tokenizer.json; `--tokenizer_name` with the run's folder and a
    resume prepare nothing; switching the kind says so in one line."""
    corpus = write_numbers_corpus(tmp_path / "numbers")
    recipe = tiny_recipe(corpus, tmp_path / "a", **FAST, tokenizer_type="sentencepiece", vocab_size=40)
    path = str(write_recipe(tmp_path / "r.yaml", recipe))
    with caplog.at_level("INFO", logger="aayn"):
        assert main(["preprocess", path]) == 0
        folder = re.search(r"pairs \([\d.,]+ MB\) in (\S+)", capsys.readouterr().out).group(1)
        assert "trained a 40-piece SentencePiece unigram model" in caplog.text
        caplog.clear()
        assert main(["train", path]) == 0
        assert main(["train", path, "--output_dir", str(tmp_path / "b"), "--tokenizer_name", str(tmp_path / "a")]) == 0
        assert main(["train", path, "--resume_from_checkpoint", "true", "--max_steps", "6"]) == 0
        assert "preparing" not in caplog.text and caplog.text.count(f"prepared data: {folder} ") == 3
        caplog.clear()
        switched = ["--tokenizer_type", "bpe", "--vocab_size", "300", "--output_dir", str(tmp_path / "c")]
        assert main(["preprocess", path, *switched]) == 0
    assert "tokenizer_type sentencepiece unigram -> bpe" in caplog.text
    model = (tmp_path / "a" / SENTENCEPIECE_FILE).read_bytes()
    for saved in (
        tmp_path / "a" / "checkpoint-4",
        tmp_path / "a" / "checkpoint-6",
        tmp_path / "b",
        tmp_path / "a" / "tokenizer",
    ):
        assert (saved / SENTENCEPIECE_FILE).read_bytes() == model, saved
    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    script = (
        "import json, sys\n"
        "from transformers import AutoTokenizer\n"
        "tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "assert 'aayn' not in sys.modules\n"
        "print(json.dumps(tokenizer(sys.argv[2:])['input_ids']))\n"
    )
    texts = ["Six un huit.", "Zéro neuf neuf cinq trois quatre.", "Seven."]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for python in filter(None, [sys.executable, os.environ.get("AAYN_OTHER_PYTHON")]):
        done = subprocess.run([python, "-c", script, str(tmp_path / "a"), *texts], capture_output=True, text=True,
                              env=env, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.splitlines()[-1]) == [processor.encode(text) + [2] for text in texts]


@pytest.mark.both_lines
def test_an_unknown_kind_is_refused_naming_the_key(tmp_path, capsys):
    corpus = write_numbers_corpus(tmp_path / "numbers")
    path = str(write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "a", **FAST)))
    assert main(["train", path, "--tokenizer_type", "wordpiece"]) == 2
    assert "tokenizer_type='wordpiece'; allowed: bpe, sentencepiece" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
