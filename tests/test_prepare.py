"""Data prepared once (aayn.data.prepare, `aayn preprocess`): the same ids as the tokenizer's own call, found again by
reruns, resumes and the same tokenizer, prepared again on a change that is named, whole or not at all."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
from training_helpers import FAST, tiny_recipe, write_numbers_corpus, write_recipe

from aayn.cli import main
from aayn.data import example_lengths, load_translation_dataset
from aayn.data.prepare import RECORD, DataPlan, prepare_data

SPLITS = ["train", "validation", "test"]
RECIPES = Path(__file__).parents[1] / "recipes"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A datasets cache of this test's own: the prepared folders land in its `aayn/`."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    return tmp_path / "hf-cache" / "aayn"


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = write_numbers_corpus(tmp_path / "numbers")
    with open(folder / "train.en", "a", encoding="utf-8") as en, open(folder / "train.fr", "a", encoding="utf-8") as fr:
        en.write("   \n" + "Nine eight seven six five four three two one zero. " * 3 + "\n")  # a blank, a long pair
        fr.write("Un.\n" + "Neuf huit sept six cinq quatre trois deux un zéro. " * 3 + "\n")
    return folder


def preparing(caplog) -> list[str]:
    """What the runs said about preparing: a new BPE or new token ids."""
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(("preparing", "trained a"))]


def test_ids_equal_the_tokenizers_own_call_in_the_narrowest_type(corpus, cache):
    plan = DataPlan(str(corpus), "en", "fr", vocab_size=300, max_source_length=12, max_target_length=14)
    prepared = prepare_data(plan, SPLITS, num_proc=2)
    tokenizer, raw = prepared.tokenizer, load_translation_dataset(str(corpus), source_lang="en", target_lang="fr")
    for split, drop in (("train", True), ("test", False)):  # training drops over-long pairs; the test truncates
        pairs = [(row["en"], row["fr"]) for row in raw[split]["translation"] if row["en"].strip() and row["fr"].strip()]
        limits = dict(max_length=None, truncation=False) if drop else dict(max_length=12, truncation=True)
        sources = [tokenizer(en, **limits)["input_ids"] for en, _ in pairs]
        limits = limits if drop else dict(max_length=14, truncation=True)
        targets = [tokenizer(text_target=fr, **limits)["input_ids"] for _, fr in pairs]
        if drop:
            kept = [i for i, (s, t) in enumerate(zip(sources, targets)) if len(s) <= 12 and len(t) <= 14]
            sources, targets = [sources[i] for i in kept], [targets[i] for i in kept]
        assert len(sources) < len(raw[split]) if drop else len(sources) == len(raw[split])
        rows = prepared.splits[split]
        assert rows["input_ids"][:] == sources and rows["labels"][:] == targets
        assert rows["attention_mask"][:] == [[1] * len(ids) for ids in sources]
        assert str(rows.features["input_ids"].feature.dtype) == "uint16" == str(rows.features["labels"].feature.dtype)
        lengths = example_lengths(rows)
        assert lengths.dtype == np.uint16 and lengths.tolist() == [max(map(len, p)) for p in zip(sources, targets)]


def test_reruns_resumes_and_the_same_tokenizer_find_the_prepared_data(corpus, cache, tmp_path, caplog, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "a", **FAST))
    with caplog.at_level("INFO", logger="aayn"):
        assert main(["preprocess", str(recipe)]) == 0
        folder = re.search(r"pairs \([\d.,]+ MB\) in (\S+)", capsys.readouterr().out).group(1)
        assert len(preparing(caplog)) == 3  # the BPE said and trained, the token ids said
        caplog.clear()
        runs = {
            "the prepared run": [],
            "a rerun elsewhere": ["--output_dir", str(tmp_path / "b")],
            "a resume": ["--resume_from_checkpoint", "true", "--max_steps", "6"],
            "the same tokenizer given": ["--output_dir", str(tmp_path / "c"), "--tokenizer_name", str(tmp_path / "a")],
        }
        for name, flags in runs.items():
            assert main(["train", str(recipe), *flags]) == 0, name
            assert not preparing(caplog), name
            assert f"prepared data: {folder} " in caplog.text, name
            caplog.clear()
    assert sorted(path.name.split("-")[0] for path in cache.iterdir()) == ["bpe", "data"]  # one of each, no copy
    assert (tmp_path / "a" / "checkpoint-6").is_dir()


def test_a_change_prepares_again_and_says_what_changed(corpus, cache, caplog):
    plan = DataPlan(str(corpus), "en", "fr", vocab_size=300, max_source_length=64, max_target_length=64)
    first = prepare_data(plan, SPLITS)
    changes = [
        (DataPlan(**{**plan.__dict__, "max_source_length": 32}), ["max_source_length 64 -> 32"]),
        (DataPlan(**{**plan.__dict__, "vocab_size": 320}), ["vocab_size 300 -> 320", "the tokenizer"]),
    ]
    for changed, said in changes:
        caplog.clear()
        with caplog.at_level("WARNING", logger="aayn"):
            assert prepare_data(changed, SPLITS).folder != first.folder
        assert all(any(words in line and "again" in line for line in preparing(caplog)) for words in said), said
    (corpus / "test.fr").write_text((corpus / "test.fr").read_text(encoding="utf-8").replace("un", "une"), "utf-8")
    caplog.clear()
    with caplog.at_level("WARNING", logger="aayn"):
        changed = prepare_data(plan, SPLITS)
    assert preparing(caplog) == [
        f"preparing the tokenized data again (the test data changed since {first.folder.name})"
    ]
    assert changed.folder != first.folder and changed.tokenizer.get_vocab() == first.tokenizer.get_vocab()


def test_a_kill_while_preparing_leaves_nothing_that_passes_for_finished(corpus, cache):
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "import aayn.data.prepare as prepare\n"
        "save = prepare.save_tokenizer\n"
        "def killed(tokenizer, folder):\n"  # the data's folder is complete but for its tokenizer and record
        "    if Path(folder).name == 'tokenizer':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    save(tokenizer, folder)\n"
        "prepare.save_tokenizer = killed\n"
        f"plan = prepare.DataPlan({str(corpus)!r}, 'en', 'fr', vocab_size=300)\n"
        "prepare.prepare_data(plan, ['train', 'validation', 'test'])\n"
    )
    env = dict(os.environ, HF_DATASETS_CACHE=str(cache.parent), HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert result.returncode == -9, result.stderr[-2000:]
    left = sorted(path.name.split("-")[0] for path in cache.iterdir())
    assert left == [".staging", "bpe"]  # the BPE was finished; the data was not, and has no final name
    prepared = prepare_data(DataPlan(str(corpus), "en", "fr", vocab_size=300), SPLITS)
    assert sorted(path.name.split("-")[0] for path in cache.iterdir()) == ["bpe", "data"]  # the stale staging is gone
    assert (prepared.folder / RECORD).is_file() and len(prepared.splits["train"]) == 241


def test_a_prepared_folder_loads_with_plain_datasets_and_transformers(corpus, cache):
    prepared = prepare_data(DataPlan(str(corpus), "en", "fr", vocab_size=300), SPLITS)
    script = (
        "import sys, datasets\n"
        "from transformers import AutoTokenizer\n"
        f"folder = {str(prepared.folder)!r}\n"
        "rows = datasets.load_from_disk(folder)['test']\n"
        "tokenizer = AutoTokenizer.from_pretrained(folder + '/tokenizer')\n"
        "print(len(rows), tokenizer.decode(rows[0]['labels'], skip_special_tokens=True))\n"
        "assert 'aayn' not in sys.modules\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    reference = (corpus / "test.fr").read_text(encoding="utf-8").splitlines()[0]
    assert result.stdout.splitlines()[-1] == f"16 {reference}"


def test_the_bpe_reads_a_seeded_sample_of_the_sentences(corpus, cache, caplog):
    plan = DataPlan(str(corpus), "en", "fr", vocab_size=300, input_sentence_size=100)
    with caplog.at_level("INFO", logger="aayn"):
        sampled = prepare_data(plan, SPLITS).tokenizer
    assert "training the vocabulary on 50 of 242 pairs" in caplog.text and "on 100 sentences" in caplog.text
    shutil.rmtree(cache)
    again = prepare_data(plan, SPLITS).tokenizer  # trained again: the same sample, the same merges
    assert again.backend_tokenizer.to_str() == sampled.backend_tokenizer.to_str()


def test_streaming_with_max_tokens_is_refused_before_any_work(tmp_path):
    from datasets import IterableDataset
    from tiny_models import tiny_config
    from transformers import Seq2SeqTrainingArguments

    from aayn import AaynForConditionalGeneration
    from aayn.training.trainer import AaynTrainer

    stream = IterableDataset.from_generator(lambda: iter([{"input_ids": [5, 2], "labels": [6, 2]}]))
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    with pytest.raises(ValueError, match="max_tokens batches a corpus sorted by length, which a streamed dataset"):
        AaynTrainer(model=AaynForConditionalGeneration(tiny_config()), args=args, train_dataset=stream, max_tokens=64)


@pytest.mark.parametrize("recipe", ["base-wmt14-en-de.yaml", "base-wmt14-en-fr.yaml", "big-wmt14-en-de.yaml"])
def test_the_wmt_recipes_prepare_step_and_save_on_a_local_wmt_folder(recipe, wmt14_mini, cache, tmp_path):
    """Each WMT recipe as written, against a folder laid out like the Hub's wmt/wmt14: the data keys (config,
    splits, limits, vocabulary, token batches) go through preparation, one step and a checkpoint. The shape is
    shrunk to keep the suite fast (the full shapes: docs/measurements.md), bf16 off (CI's CPU may emulate it)."""
    shrink = ["--d_model", "32", "--ffn_dim", "64", "--encoder_layers", "1", "--decoder_layers", "1"]
    short = ["--max_steps", "1", "--save_steps", "1", "--gradient_accumulation_steps", "1", "--eval_strategy", "no"]
    samples = ["--max_train_samples", "400", "--max_predict_samples", "4", "--generation_num_beams", "1"]
    flags = ["--dataset_name", str(wmt14_mini), "--output_dir", str(tmp_path / "out"), "--bf16", "false"]
    flags += ["--use_cpu", "true", "--report_to", "none", "--attention_heads", "2", "--num_examples_to_print", "0"]
    assert main(["train", str(RECIPES / recipe), *flags, *shrink, *short, *samples]) == 0
    assert (tmp_path / "out" / "checkpoint-1" / "model.safetensors").is_file()
    assert (tmp_path / "out" / "model.safetensors").is_file()
