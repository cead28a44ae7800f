"""Sampled translation (`aayn translate --sampling`, fairseq's `--sampling --sampling-topk`): each token drawn as
transformers' own sampling draws it, top-1 sampling the greedy search, the draws started from --seed, a corpus of
shards drawn shard by shard (a rerun after a kill, or another order, writes the same text), and what cannot sample
refused in one line."""

import pytest
import torch
from cli_helpers import fails
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from aayn.cli import main as aayn

SOURCES = ["one two three", "four five", "six seven eight nine", "zero", "two two two"]


def translated(capsys, model, *flags, texts=SOURCES) -> list[str]:
    capsys.readouterr()
    assert aayn(["translate", "--model", str(model), "--max_new_tokens", "8", *map(str, flags), *texts]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_sampled_sentence_is_transformers_own_sample_and_top_1_is_greedy(varied, capsys):
    """One sentence, top-k 5, top-p 0.9, temperature 1.5, seed 7: the tokens of plain transformers' `generate`
    (do_sample) after `torch.manual_seed(7)` (catches top-k and top-p swapped, the temperature or the seed left
    out); top-1 sampling is the greedy search's output for every source (catches top-k not passed). aayn's
    --max_new_tokens 8 counts eos, as its searches do: transformers' 7 new tokens before it."""
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(varied).eval(), AutoTokenizer.from_pretrained(varied)
    torch.manual_seed(7)
    with torch.no_grad():
        out = model.generate(**tokenizer(SOURCES[:1], return_tensors="pt"), do_sample=True, num_beams=1, top_k=5,
                             top_p=0.9, temperature=1.5, max_new_tokens=7)  # fmt: skip
    expected = tokenizer.batch_decode(out, skip_special_tokens=True)[0].strip()
    drawn = translated(capsys, varied, "--sampling", "--sampling_topk", 5, "--sampling_topp", 0.9, "--temperature",
                       1.5, "--seed", 7, texts=SOURCES[:1])  # fmt: skip
    assert drawn == [expected]
    with torch.no_grad():  # transformers' greedy search, within the same 8 tokens, eos counted
        out = model.generate(**tokenizer(SOURCES, return_tensors="pt", padding=True), paper_decoding=False,
                             do_sample=False, num_beams=1, max_new_tokens=7)  # fmt: skip
    greedy = [text.strip() for text in tokenizer.batch_decode(out, skip_special_tokens=True)]
    assert translated(capsys, varied, "--sampling", "--sampling_topk", 1) == greedy
    assert translated(capsys, varied, "--sampling", "--seed", 1) != greedy  # full sampling draws otherwise here


def test_the_same_seed_draws_the_same_and_another_seed_otherwise(varied, capsys):
    first = translated(capsys, varied, "--sampling", "--seed", 3)
    assert translated(capsys, varied, "--sampling", "--seed", 3) == first
    assert translated(capsys, varied, "--sampling", "--seed", 4) != first


def test_a_corpus_is_drawn_shard_by_shard_whatever_ran_before(varied, tmp_path, monkeypatch, capsys):
    """Three shards of the same lines sampled whole: each draws its own translations; killed in the second shard
    and rerun, and the last shard alone: each output shard the same text as in the whole run (catches the draws
    not started anew for each shard, and one seed for every shard)."""
    from test_distillation import killed_in_the_second_shard

    corpus = tmp_path / "in"
    corpus.mkdir()
    for index in range(3):  # the same lines in each: a shard's draws are its own (catches one seed for them all)
        (corpus / f"part-{index}.txt").write_text("".join(f"{text}\n" for text in SOURCES))
    sampled = ["--model", str(varied), "--sampling", "--seed", "5", "--max_new_tokens", "8"]
    whole = tmp_path / "whole"
    assert aayn(["translate", *sampled, "--input", str(corpus), "--output_dir", str(whole)]) == 0
    written = {path.name: path.read_text() for path in whole.iterdir()}
    assert len(written) == 3 and len(set(written.values())) == 3
    resumed = tmp_path / "resumed"
    with monkeypatch.context() as patch:
        killed_in_the_second_shard(patch)
        with pytest.raises(KeyboardInterrupt):
            aayn(["translate", *sampled, "--input", str(corpus), "--output_dir", str(resumed)])
    assert len(list(resumed.glob("*.txt"))) == 1
    assert aayn(["translate", *sampled, "--input", str(corpus), "--output_dir", str(resumed)]) == 0
    assert {path.name: path.read_text() for path in resumed.glob("*.txt")} == written
    alone = tmp_path / "alone"
    assert aayn(["translate", *sampled, "--input", str(corpus / "part-2.txt"), "--output_dir", str(alone)]) == 0
    assert (alone / "part-2.txt").read_text() == written["part-2.txt"]
    capsys.readouterr()


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--sampling_topk", "10"], "--sampling_topk shapes the draws of --sampling: add --sampling"),
        (["--sampling", "--num_beams", "4"], "num_beams 4 searches: give one of them"),
        (["--sampling", "--sampling_topp", "0"], "sampling's top_p must be in (0, 1], got 0.0"),
        (["--sampling", "--temperature", "-1"], "sampling's temperature must be positive"),
        (["--sampling", "--sampling_topk", "-2"], "sampling's top_k must be an integer >= 0"),
    ],
)
def test_sampling_that_cannot_be_is_refused_in_one_line(varied, capsys, flags, said):
    assert said in fails(capsys, "translate", "--model", varied, *flags, "one")


def test_an_engine_or_an_ensemble_that_cannot_sample_is_refused_in_one_line(varied, capsys):
    """An ensemble, and an engine without the "sampling" ability (ONNX's, here a bare one), refuse --sampling in one
    line before decoding anything."""
    from aayn.formats.translator import Sampling, Translator

    assert "sampling: give one --model" in fails(capsys, "translate", "--model", varied, "--model", varied,
                                                 "--sampling", "one")  # fmt: skip

    class Unsampling(Translator):
        name = "runs/onnx"

        def encode(self, texts):
            raise AssertionError("decoded before the refusal")

    with pytest.raises(ValueError, match="--model runs/onnx: it translates without --sampling"):
        Unsampling().nbest(["one"], sampling=Sampling())


def test_a_ctranslate2_export_samples_from_its_seed_and_top_1_is_its_greedy_search(varied, tmp_path, capsys):
    """CTranslate2's sampling through the export (`sampling_topk` and the rest, `set_random_seed`): top-1 sampling
    is its greedy output (catches top-k not passed), the same seed draws the same and another seed otherwise
    (catches the seed not set)."""
    pytest.importorskip("ctranslate2")
    ct2 = tmp_path / "ct2"
    assert aayn(["export", "--model", str(varied), "--format", "ctranslate2", "--output_dir", str(ct2)]) == 0
    greedy = translated(capsys, ct2, "--num_beams", 1)
    assert translated(capsys, ct2, "--sampling", "--sampling_topk", 1) == greedy
    first = translated(capsys, ct2, "--sampling", "--seed", 3)
    assert first != greedy and translated(capsys, ct2, "--sampling", "--seed", 3) == first
    assert translated(capsys, ct2, "--sampling", "--seed", 4) != first


def test_a_trained_folders_written_out_max_length_draws_no_warning_per_batch(varied, tmp_path):
    """A trained folder's generation config holds every value written out, transformers' default max_length 20
    among them: sampling (transformers' search, under max_new_tokens) says nothing of it (transformers warns of
    both being set at every call: a line a batch) and is not cut at 20 tokens. Catches the folder's max_length
    handed to transformers beside max_new_tokens."""
    import json
    import shutil
    import subprocess
    import sys

    folder = tmp_path / "trained"
    shutil.copytree(varied, folder)
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, "max_length": 20, "do_sample": False}))
    texts = [" ".join(["one two three"] * n) for n in (1, 2, 8, 9)]  # two batches at --batch_tokens 40
    result = subprocess.run([sys.executable, "-m", "aayn.cli", "translate", "--model", str(folder), "--sampling",
                             "--sampling_topk", "1", "--max_new_tokens", "30", "--batch_tokens", "40", *texts],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "max_length" not in result.stderr and len(result.stdout.splitlines()) == 4
