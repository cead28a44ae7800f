"""Nothing lost, nothing mixed: what `aayn train` may delete, two runs on one folder, credentials, damaged
checkpoints and model folders, a run that ended at its last checkpoint, mistakes caught before anything is
written."""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import fails
from safetensors.torch import load_file
from training_helpers import FAST, tiny_recipe, write_numbers_corpus, write_recipe

from aayn.cli import main as aayn
from aayn.training.output import RUN_MARKER, RunLock, checkpoint_faults

SCRIPTS = Path(__file__).parent / "scripts"


def python(*args, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, *map(str, args)], capture_output=True, text=True, env=env, timeout=600, **kwargs
    )


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_numbers_corpus(tmp_path_factory.mktemp("numbers"))


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


def recipe_for(corpus, tmp_path, output, **overrides) -> Path:
    return write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, output, **{**FAST, **overrides}))


# 1. --overwrite_output_dir deletes only an aayn run, and none of this run's inputs, after every check


def test_overwrite_never_deletes_the_model_being_fine_tuned(corpus, run_copy, tmp_path, capsys):
    before = snapshot(run_copy)
    recipe = recipe_for(corpus, tmp_path, run_copy)
    for source in (["--model_name_or_path", run_copy], ["--model_name_or_path", run_copy / "checkpoint-4"]):
        error = fails(capsys, "train", recipe, *source, "--overwrite_output_dir", "true")
        assert "--overwrite_output_dir would delete --model_name_or_path" in error
    error = fails(capsys, "train", recipe, "--tokenizer_name", run_copy / "tokenizer", "--overwrite_output_dir", "true")
    assert "would delete --tokenizer_name" in error
    assert snapshot(run_copy) == before


def test_overwrite_never_deletes_a_folder_that_holds_no_aayn_run(corpus, tmp_path, capsys):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("years of work")
    recipe = recipe_for(corpus, tmp_path, thesis)
    error = fails(capsys, "train", recipe, "--d_model", "-32", "--overwrite_output_dir", "true")
    assert "d_model" in error
    error = fails(capsys, "train", recipe, "--overwrite_output_dir", "true")
    assert f"holds files that aayn train did not write (no {RUN_MARKER}" in error and "deletes" in error
    assert snapshot(thesis) == {"chapter1.tex": b"years of work"}


def test_overwrite_replaces_an_earlier_aayn_run(corpus, run_copy, tmp_path):
    result = python(
        "-m", "aayn.train", recipe_for(corpus, tmp_path, run_copy, max_steps=2), "--overwrite_output_dir", "true"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in run_copy.glob("checkpoint-*")) == ["checkpoint-2"]
    assert json.loads((run_copy / RUN_MARKER).read_text())["state"] == "finished"


# 2. one run at a time in an output_dir; a killed run's hold is taken over


def test_a_second_run_is_refused_while_the_first_holds_the_folder(corpus, tmp_path, capsys):
    output = tmp_path / "out"
    output.mkdir()
    holder = RunLock(output)
    holder.acquire()
    holder.start()
    try:
        error = fails(capsys, "train", recipe_for(corpus, tmp_path, output))
        assert f"output_dir {output} is in use by another aayn train (process {os.getpid()}" in error
    finally:
        holder.release("failed")
    assert [p.name for p in output.iterdir()] == [RUN_MARKER]


def test_a_run_in_progress_is_neither_joined_nor_overwritten(corpus, tmp_path, capsys):
    output, go = tmp_path / "out", tmp_path / "go"
    recipe = recipe_for(corpus, tmp_path, output)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    log = open(tmp_path / "first.log", "w")  # noqa: SIM115  a pipe the test does not read would fill and block
    first = subprocess.Popen(
        [sys.executable, SCRIPTS / "pause_at_step.py", "3", go, recipe, "--seed", "1"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
    )
    try:
        assert "paused" in (line.strip() for line in first.stdout)  # read up to it (False at the end of output)
        for flags in ([], ["--overwrite_output_dir", "true"], ["--resume_from_checkpoint", "true"]):
            assert aayn(["train", str(recipe), "--seed", "2", *flags]) == 2  # here: another process holds it
            said = capsys.readouterr().err
            assert "is in use by another aayn train" in said, said[-2000:]
        go.touch()
        out, _ = first.communicate(timeout=600)
    finally:
        first.kill()
        log.close()
    assert first.returncode == 0, (tmp_path / "first.log").read_text()[-3000:]
    printed = json.loads(out.strip().splitlines()[-1])
    assert printed["test_bleu"] == json.loads((output / "all_results.json").read_text())["test_bleu"]
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


def test_the_hold_of_a_killed_run_is_taken_over_and_logged(corpus, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    script = (
        "import time; from pathlib import Path; from aayn.training.output import RunLock\n"
        f"lock = RunLock(Path({str(output)!r})); lock.acquire(); lock.start(); print('held', flush=True)\n"
        "time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    result = python("-m", "aayn.train", recipe_for(corpus, tmp_path, output))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"taking over output_dir {output} from process {holder.pid}" in result.stderr
    assert json.loads((output / RUN_MARKER).read_text())["state"] == "finished"


# 3. no credential field of the training arguments is ever written


def test_no_credential_reaches_disk(corpus, tmp_path, monkeypatch):
    from transformers import Seq2SeqTrainingArguments

    from aayn.training import parse_arguments, run

    monkeypatch.delenv("HF_TOKEN", raising=False)  # restored after the test; the run puts the token there
    credentials = [
        f.name
        for f in dataclasses.fields(Seq2SeqTrainingArguments)
        if "token" in f.name and f.default is None and "str" in str(f.type)
    ]
    assert "hub_token" in credentials  # and push_to_hub_token on 4.57
    flags = [item for name in credentials for item in (f"--{name}", f"hf_secret_{name}")]
    run(*parse_arguments([str(recipe_for(corpus, tmp_path, tmp_path / "out")), *flags]))
    assert list((tmp_path / "out").glob("checkpoint-*/training_args.bin"))
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert b"hf_secret_" not in path.read_bytes(), path


# 4. a checkpoint whose files do not parse is incomplete


def test_resume_skips_a_checkpoint_a_full_disk_cut_short(corpus, run_copy, tmp_path):
    (run_copy / "checkpoint-4" / "trainer_state.json").write_bytes(b"")
    recipe = recipe_for(corpus, tmp_path, run_copy, max_steps=6)
    result = python("-m", "aayn.train", recipe, "--resume_from_checkpoint", "true")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipping checkpoint-4: trainer_state.json is empty" in result.stderr
    assert "checkpoint-2, the newest complete checkpoint" in result.stderr
    assert json.loads((run_copy / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == 6


@pytest.mark.parametrize(
    "name, damage, fault",
    [
        ("trainer_state.json", lambda data: data[: len(data) // 2], "trainer_state.json does not parse"),
        ("optimizer.pt", lambda data: data[: len(data) // 2], "optimizer.pt is cut short"),
        ("scheduler.pt", lambda data: b"", "scheduler.pt is empty"),
        ("model.safetensors", lambda data: data[: len(data) - 100], "model.safetensors is cut short"),
        ("model.safetensors", lambda data: b"garbage!" * 10, "model.safetensors is cut short or not a safetensors"),
    ],
)
def test_checkpoint_faults_name_the_damaged_file(finished_run, tmp_path, name, damage, fault):
    checkpoint = Path(shutil.copytree(finished_run / "checkpoint-4", tmp_path / "checkpoint-4"))
    assert checkpoint_faults(checkpoint) == []
    (checkpoint / name).write_bytes(damage((checkpoint / name).read_bytes()))
    faults = checkpoint_faults(checkpoint)
    assert len(faults) == 1 and faults[0].startswith(fault)


# 5. a run killed after its last checkpoint finishes without training


def test_killed_while_writing_the_final_folder_then_resumed_trains_no_further(corpus, tmp_path):
    output = tmp_path / "out"
    recipe = recipe_for(corpus, tmp_path, output, save_total_limit=2)
    killed = python(SCRIPTS / "kill_in_final_save.py", recipe)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (output / "model.safetensors").exists()
    last = load_file(output / "checkpoint-4" / "model.safetensors")
    checkpoints = snapshot(output / "checkpoint-2") | snapshot(output / "checkpoint-4")
    resumed = python("-m", "aayn.train", recipe, "--resume_from_checkpoint", "true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "nothing left to train" in resumed.stderr
    assert sorted(p.name for p in output.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert snapshot(output / "checkpoint-2") | snapshot(output / "checkpoint-4") == checkpoints
    final = load_file(output / "model.safetensors")
    assert final.keys() == last.keys() and all(torch.equal(final[k], last[k]) for k in last)
    assert "test_bleu" in json.loads((output / "all_results.json").read_text())
    assert not any(p.name.startswith("_final") for p in output.iterdir())


# 6. mistakes are found before anything is written


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--d_model", "-32"], "d_model"),
        (["--attention_heads", "3"], "divisible"),
        (["--max_source_length", "1"], "max_source_length must be >= 2"),
        (["--max_tokens", "1"], "max_tokens=1 cannot batch a sentence of 256 tokens"),
        (["--max_steps", "-5"], "max_steps must be positive, or -1"),
        (["--d_model", "1000000000", "--attention_heads", "8"], "parameters"),
    ],
)
def test_bad_values_stop_before_anything_is_written(corpus, tmp_path, capsys, flags, message):
    error = fails(capsys, "train", recipe_for(corpus, tmp_path, tmp_path / "out"), *flags)
    assert message in error
    assert not (tmp_path / "out").exists()


def test_blank_data_stops_before_anything_is_written(tmp_path, capsys):
    data = write_numbers_corpus(tmp_path / "data")
    for lang in ("en", "fr"):
        (data / f"train.{lang}").write_text(" \n\t\n \n")
    error = fails(capsys, "train", recipe_for(data, tmp_path, tmp_path / "out"))
    assert "train split" in error and "all 3 rows are blank" in error
    assert not (tmp_path / "out").exists()


# 7. a damaged model folder is named file by file, for every command that reads one


DAMAGES = {
    "cut weights": ("model.safetensors", lambda data: data[: len(data) // 2], "model.safetensors is cut short"),
    "empty weights": ("model.safetensors", lambda data: b"", "model.safetensors is cut short or not a safetensors"),
    "garbage weights": ("model.safetensors", lambda data: os.urandom(64), "model.safetensors"),
    "bad config": ("config.json", lambda data: data[:-20], "config.json is not valid JSON"),
    "cut tokenizer": ("tokenizer.json", lambda data: data[: len(data) // 3], "tokenizer.json is not valid JSON"),
    "no tokenizer": ("tokenizer.json", None, "no tokenizer.json in the folder"),
}


def commands(folder: Path, tmp_path: Path, corpus: Path) -> dict[str, list]:
    data = ["--dataset_name", corpus, "--source_lang", "en", "--target_lang", "fr"]
    return {
        "translate": ["translate", "--model", folder, "One."],
        "evaluate": ["evaluate", "--model", folder, *data],
        "export": ["export", "--format", "ctranslate2", "--model", folder, "--output_dir", tmp_path / "ct2"],
        "train": ["train", recipe_for(corpus, tmp_path, tmp_path / "tuned"), "--model_name_or_path", folder],
    }


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("command", ["translate", "evaluate", "export", "train"])
def test_a_damaged_model_folder_is_named(saved, corpus, tmp_path, capsys, damage, command):
    folder = Path(shutil.copytree(saved[0], tmp_path / "model"))
    name, change, message = DAMAGES[damage]
    path = folder / name
    path.unlink() if change is None else path.write_bytes(change(path.read_bytes()))
    error = fails(capsys, *commands(folder, tmp_path, corpus)[command])
    assert message in error and (str(path) in error or str(folder) in error)
    assert not (tmp_path / "ct2").exists() and not (tmp_path / "tuned").exists()


def test_export_onto_a_full_disk_leaves_nothing_and_a_rerun_works(saved, tmp_path, monkeypatch, capsys):
    from aayn.data import tokenizer  # what every exported folder's tokenizer is written with

    def full_disk(tokenizer, folder):
        (Path(folder) / "tokenizer.json").write_bytes(b"{")  # cut short, as by a full disk
        raise OSError(28, "No space left on device")

    argv = ["export", "--format", "ctranslate2", "--model", saved[0], "--output_dir", tmp_path / "ct2"]
    with monkeypatch.context() as patch:
        patch.setattr(tokenizer, "save_tokenizer", full_disk)
        assert "No space left on device" in fails(capsys, *argv)
    assert list(tmp_path.iterdir()) == []
    assert aayn([*map(str, argv)]) == 0
    assert {"model.bin", "tokenizer.json"} <= {p.name for p in (tmp_path / "ct2").iterdir()}
