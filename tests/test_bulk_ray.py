"""Bulk translation on Ray Data (`aayn translate --input ... --ray`, `aayn.translation.bulk_ray`), on one local Ray
started once for the module (`ray.init(num_cpus=2)`): two actors give every shard what the same command gives it in one
process; a rerun starts no work; an actor SIGKILLed mid-run is replaced and a driver SIGKILLed mid-run leaves a rerun
only what is missing, nothing lost or doubled; a bad shard is named in one line, out of Ray's wrapping, and so are
actors' GPUs and device that do not go together."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from cli_helpers import fails

from aayn.cli import main as aayn

ray = pytest.importorskip("ray")
pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def shards(folder):
    folder.mkdir(parents=True, exist_ok=True)
    texts = ["Six one eight.", "Two.", "Zero nine nine five three four.", "One."]
    for shard in range(3):
        (folder / f"part-{shard}.txt").write_text("".join(f"{t}\n" for t in texts[shard:] + texts[:shard]))
    (folder / "rows.jsonl").write_text("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(texts)))
    pq.write_table(pa.table({"text": texts}), folder / "rows.parquet")


def test_a_bad_shard_is_named_in_one_line_through_ray(saved, local_ray, tmp_path, capsys):
    shards(tmp_path / "in")
    (tmp_path / "in" / "rows.jsonl").write_text('{"text": "Two."}\n{broken\n')
    message = fails(capsys, "translate", "--model", saved[0], "--input", tmp_path / "in", "--output_dir",
                    tmp_path / "out", "--ray", "--concurrency", 1)  # fmt: skip
    assert "rows.jsonl:2: not a JSON object" in message
    assert not (tmp_path / "out" / "rows.jsonl").exists()
    assert "--ray translates a corpus of shards" in fails(capsys, "translate", "--model", saved[0], "--ray", "Two.")


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--num_gpus_per_worker", "1"], "--num_gpus_per_worker 1 holds GPUs that actors on --device cpu leave idle"),
        (["--device", "cuda"], "--device cuda with --ray needs --num_gpus_per_worker"),
        (["--device", "cuda:1", "--num_gpus_per_worker", "1"], "--device cuda:1 with --ray: an actor sees the GPUs"),
        (
            ["--device", "cuda", "--num_gpus_per_worker", "0.5", "--concurrency", "4"],
            "--concurrency 4 actors of --num_gpus_per_worker 0.5: the local Ray finds 0 GPUs on this machine",
        ),
        (["--num_gpus_per_worker", "-1"], "argument --num_gpus_per_worker: must be a number of at least 0, got -1"),
        (["--num_cpus_per_worker", "0"], "argument --num_cpus_per_worker: must be positive, got 0"),
    ],
)
def test_actors_gpus_and_device_that_do_not_go_together_are_refused_before_work(saved, local_ray, tmp_path, capsys,
                                                                                 flags, said):  # fmt: skip
    """Ray's actors translate on the GPUs Ray gives them (`--device cuda` with `--num_gpus_per_worker`) or on CPU; a
    local Ray with fewer GPUs than the actors hold is refused, not started with GPUs that are not there."""
    shards(tmp_path / "in")
    command = ["translate", "--model", saved[0], "--input", tmp_path / "in", "--output_dir", tmp_path / "out", "--ray"]
    if said.startswith("argument"):  # argparse's own refusal
        with pytest.raises(SystemExit) as exit_:
            aayn([*map(str, command), *flags])
        assert exit_.value.code == 2 and said in capsys.readouterr().err
        return
    assert said in fails(capsys, *command, *flags)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--device", "cuda", "--num_gpus_per_worker", 1], "--device cuda: aayn runs ONNX folders on cpu"),
        (["--dtype", "bfloat16"], "--dtype bfloat16: --model {onnx} is an ONNX model"),
    ],
)
def test_what_an_exports_engine_cannot_do_is_refused_before_ray_starts(tmp_path, capsys, flags, said):
    """The driver opens no model, so what an export's engine can do is checked from its format: an ONNX folder
    (recognized by its graphs' names; nothing is loaded) given GPUs (its engine runs on CPU), or a weights' type
    (it computes in the type it was written in), is refused before Ray starts."""
    from aayn.formats.onnx import OnnxFolder

    onnx = tmp_path / "onnx"
    onnx.mkdir()
    for name in OnnxFolder.files:
        (onnx / name).write_bytes(b"")
    shards(tmp_path / "in")
    message = fails(capsys, "translate", "--model", onnx, "--input", tmp_path / "in", "--output_dir",
                    tmp_path / "out", "--ray", *flags)  # fmt: skip
    assert said.format(onnx=onnx) in message
    assert not (tmp_path / "out").exists()  # made only once the shards go to Ray


def test_an_actor_computes_as_dtype_and_cuda_graphs_ask(saved, tmp_path):
    """`--dtype` and `--cuda_graphs` reach each actor's translator (the class Ray builds an actor from, built here
    as Ray builds it, from its keywords)."""
    import torch

    from aayn.formats.translator import EngineOptions
    from aayn.translation.bulk import BulkSettings
    from aayn.translation.bulk_ray import ShardTranslator

    settings = BulkSettings(tmp_path / "out", "text", 1000, {})
    options = EngineOptions("bfloat16", cuda_graphs=True)
    actor = ShardTranslator(names=[str(saved[0])], device="cpu", needs=(), settings=settings, options=options)
    assert {p.dtype for p in actor.translator.model.parameters()} == {torch.bfloat16}
    assert actor.translator.cuda_graphs


def many_shards(folder, count: int = 6, lines: int = 12) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    texts = ["Six one eight.", "Two.", "Zero nine nine five three four.", "One.", "Seven seven.", "Eight."]
    for shard in range(count):
        (folder / f"s{shard}.txt").write_text("".join(f"{texts[(shard + i) % len(texts)]}\n" for i in range(lines)))


def wait_for(predicate, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert predicate(), "timed out"


def actor_processes() -> list:
    """This machine's Ray actors that hold a ShardTranslator (Ray names its worker processes after the class)."""
    return [p for p in psutil.process_iter(["cmdline"]) if "ShardTranslator" in " ".join(p.info["cmdline"] or [])]


def claimed_shard(out: Path) -> tuple[str, psutil.Process]:
    """(a shard's name, the actor at work on it): the partial file an actor makes when it takes a shard."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        actors = {actor.pid: actor for actor in actor_processes()}
        for partial in out.glob(".*.partial-*"):
            name, pid = re.fullmatch(r"\.(.+)\.partial-(\d+)", partial.name).groups()
            if int(pid) in actors and not (out / name).exists():
                return name, actors[int(pid)]
        time.sleep(0.02)
    raise AssertionError("no actor at work")


def same_as_one_process(saved, folder, out, here) -> None:
    """`out` holds what `aayn translate --input` in this process writes, every shard whole, nothing else."""
    assert aayn(["translate", "--model", str(saved[0]), "--input", str(folder), "--output_dir", str(here)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in here.iterdir())  # no partials left
    for shard in here.iterdir():  # parquet too: pyarrow writes a table's file the same in any process
        assert (out / shard.name).read_bytes() == shard.read_bytes(), shard.name


def test_two_actors_one_killed_mid_run_write_every_shard_as_one_process(saved, local_ray, tmp_path, capsys,
                                                                        monkeypatch):  # fmt: skip
    """Two actors over text, .jsonl and .parquet shards, one of them SIGKILLed at work on a shard (its claim, the
    shard's partial file, there) once the first shard is out: Ray Data retries that shard on another actor; the run
    ends with every shard what one process writes, whole; a rerun starts no work; the driver opens no model (each
    actor opens its own)."""
    shards(tmp_path / "in")
    many_shards(tmp_path / "in")
    out, ended = tmp_path / "out", []
    command = ["translate", "--model", str(saved[0]), "--input", str(tmp_path / "in"), "--output_dir", str(out)]

    def driver_opens_no_model(*args, **kwargs):  # the actors open theirs; the driver only checks the folder
        raise AssertionError("the driver opened a translator")

    monkeypatch.setattr("aayn.translation.opening.open_translator", driver_opens_no_model)
    run = threading.Thread(target=lambda: ended.append(aayn([*command, "--ray", "--concurrency", "2"])))
    run.start()
    wait_for(lambda: out.is_dir() and any(p.suffix == ".txt" for p in out.iterdir()) and actor_processes())
    held, killed = claimed_shard(out)  # the shard that actor holds
    written = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    killed_at = time.time_ns()
    killed.send_signal(signal.SIGKILL)
    run.join(timeout=300)
    assert ended == [0] and not killed.is_running() and len(written) < 11  # killed mid-run, the rest done by others
    # the retry: the shard the killed actor held, written after the kill (by another; its claim cleared at the end)
    assert held not in written and (out / held).stat().st_mtime_ns > killed_at
    assert not list(out.glob(".*.partial-*"))
    assert "11 shards (0 already done), 92 lines" in capsys.readouterr().err
    assert aayn([*command, "--ray"]) == 0
    assert "11 shards (11 already done), 0 lines" in capsys.readouterr().err
    monkeypatch.undo()
    same_as_one_process(saved, tmp_path / "in", out, tmp_path / "here")


def test_a_driver_killed_mid_run_leaves_a_rerun_only_what_is_missing(saved, local_ray, tmp_path, capsys):
    """SIGKILL of the driver (`aayn translate --ray` in a process of its own, joining the module's Ray with
    `--ray_address`, as on a cluster) once the first shard is out: its actors go with it, and the rerun, through Ray
    again (an actor of the same Ray), translates only the shards not there, each whole."""
    many_shards(tmp_path / "in")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "aayn.cli", "translate", "--model", str(saved[0]), "--input",
               str(tmp_path / "in"), "--output_dir", str(out), "--ray", "--concurrency", "1",
               "--ray_address", ray.get_runtime_context().gcs_address]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_for(lambda: out.is_dir() and any(p.suffix == ".txt" for p in out.iterdir()) or driver.poll() is not None)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    done = len([p for p in out.iterdir() if p.suffix == ".txt"])
    assert 0 < done < 6
    capsys.readouterr()
    assert driver.returncode == -signal.SIGKILL
    assert aayn(["translate", "--model", str(saved[0]), "--input", str(tmp_path / "in"), "--output_dir", str(out),
                 "--ray", "--concurrency", "1"]) == 0  # fmt: skip
    assert f"6 shards ({done} already done), {(6 - done) * 12} lines" in capsys.readouterr().err
    same_as_one_process(saved, tmp_path / "in", out, tmp_path / "here")


def test_distillation_on_ray_writes_the_teachers_translations_as_in_one_process(varied, local_ray, tmp_path,
                                                                               monkeypatch):  # fmt: skip
    """`aayn distill --ray`: two actors translate the shards of 2 sources; the corpus is plain transformers'
    `generate` of each source in order (catches shards paired out of order, one left out, the references written
    instead), the driver opening no teacher; the work folder gone; actors on a device Ray gives them none refused
    before any work."""
    from test_distillation import SOURCES, distill, generated, lines, telling, write_corpus

    corpus, output = write_corpus(tmp_path / "corpus"), tmp_path / "distilled"

    def driver_opens_no_model(*args, **kwargs):
        raise AssertionError("the driver opened a translator")

    expected = telling(generated(varied, SOURCES))
    monkeypatch.setattr("aayn.translation.opening.open_translator", driver_opens_no_model)
    assert distill(varied, corpus, output, "--shard_lines", "2", "--ray", "--concurrency", "2") == 0
    assert lines(output / "train.en") == SOURCES and lines(output / "train.fr") == expected
    assert not (tmp_path / ".distill-distilled").exists()
    assert distill(varied, corpus, tmp_path / "gpu", "--ray", "--device", "cuda") == 2
    assert not (tmp_path / "gpu").exists() and not (tmp_path / ".distill-gpu").exists()


def test_actors_put_the_targets_token_first_as_one_process_does(two_pair_folder, local_ray, tmp_path):
    """`--ray --target_lang fr` over a multilingual folder's shards writes what one process writes with
    `--target_lang fr`, which is not what it writes into en (asserted, so that the comparison can tell). Catches the
    actors' translator left without its target's token."""
    source = tmp_path / "in"
    source.mkdir()
    english = ["In the beginning God created the heavens and the earth.", "The earth was formless and empty."]
    (source / "a.txt").write_text("".join(f"{text}\n" for text in english))
    (source / "b.txt").write_text(f"{english[1]}\n")
    command = ["translate", "--model", str(two_pair_folder), "--input", str(source), "--max_new_tokens", "6"]
    written = {}
    for target, ray_flags in (("fr", ["--ray", "--concurrency", "2"]), ("fr", []), ("en", [])):
        out = tmp_path / f"{target}{'-ray' if ray_flags else ''}"
        assert aayn([*command, "--target_lang", target, "--output_dir", str(out), *ray_flags]) == 0
        written[out.name] = {name: (out / name).read_text() for name in ("a.txt", "b.txt")}
    assert written["fr-ray"] == written["fr"] != written["en"]


def test_actors_sample_each_shard_as_one_process_does(varied, local_ray, tmp_path):
    """`--ray --sampling`: two actors write the text one process draws for each shard (each shard's draws its own,
    whichever actor takes it, in whatever order; catches the actors' draws started from one seed for all)."""
    shards(tmp_path / "in")
    command = ["translate", "--model", str(varied), "--input", str(tmp_path / "in"), "--sampling", "--sampling_topk",
               "10", "--seed", "3", "--max_new_tokens", "6"]  # fmt: skip
    assert aayn([*command, "--output_dir", str(tmp_path / "ray"), "--ray", "--concurrency", "2"]) == 0
    assert aayn([*command, "--output_dir", str(tmp_path / "here")]) == 0
    names = sorted(path.name for path in (tmp_path / "here").iterdir())
    assert len(names) == 5 and all((tmp_path / "ray" / n).read_bytes() == (tmp_path / "here" / n).read_bytes()
                                   for n in names)  # fmt: skip
