"""Bulk translation of a corpus in shards (`aayn translate --input GLOB_OR_FOLDER --output_dir OUT`,
`aayn.translation.bulk`): each shard's output equals what `aayn translate` gives its lines, line for line and in order,
in the shard's own format (text lines, .jsonl and .parquet rows with a `translation` field beside theirs); a rerun
translates only the missing shards, after a SIGKILL too (nothing lost, nothing doubled); bad shards and flags are
refused in one line."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import fails

from aayn.cli import main as aayn
from aayn.translation.bulk import lines_of, one_line

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

WORDS = ["Six one eight.", "Two.", "Zero nine nine five three four.", "One.", "Seven seven.", "Eight."]


@pytest.fixture(scope="module")
def alone(saved):
    from aayn.translation.opening import open_translator

    return dict(zip(WORDS, open_translator([str(saved[0])]).translate(WORDS)))


def corpus(folder, lines: int = 6):
    folder.mkdir(parents=True, exist_ok=True)
    texts = [WORDS[i % len(WORDS)] for i in range(lines)]
    (folder / "a.txt").write_text("".join(f"{t}\n" for t in texts))
    (folder / "b.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), folder / "c.parquet")
    return texts


def test_each_shard_as_aayn_translate_gives_it_and_a_rerun_only_what_is_missing(saved, alone, tmp_path, capsys):
    texts = corpus(tmp_path / "in")
    out = tmp_path / "out"
    assert aayn(["translate", "--model", str(saved[0]), "--input", str(tmp_path / "in"), "--output_dir", str(out)]) == 0
    expected = [alone[t] for t in texts]
    assert lines_of((out / "a.txt").read_text()) == [one_line(t) for t in expected]
    rows = [json.loads(line) for line in lines_of((out / "b.jsonl").read_text())]
    assert rows == [{"id": i, "text": t, "translation": e} for i, (t, e) in enumerate(zip(texts, expected))]
    table = pq.read_table(out / "c.parquet")
    assert table.column("translation").to_pylist() == expected and table.column("id").to_pylist() == list(range(6))
    assert "3 shards (0 already done), 18 lines" in capsys.readouterr().err
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    (out / "b.jsonl").unlink()
    assert aayn(["translate", "--model", str(saved[0]), "--input", str(tmp_path / "in" / "*.jsonl"), "--output_dir",
                 str(out)]) == 0  # fmt: skip
    assert "1 shards (0 already done), 6 lines" in capsys.readouterr().err
    assert aayn(["translate", "--model", str(saved[0]), "--input", str(tmp_path / "in"), "--output_dir", str(out)]) == 0
    assert "3 shards (3 already done), 0 lines" in capsys.readouterr().err
    aligned = tmp_path / "aligned"  # alignments as `aayn translate --print_alignment` gives them, beside the text
    assert aayn(["translate", "--model", str(saved[0]), "--input", str(tmp_path / "in" / "b.jsonl"), "--output_dir",
                 str(aligned), "--print_alignment"]) == 0  # fmt: skip
    rows = [json.loads(line) for line in lines_of((aligned / "b.jsonl").read_text())]
    assert [row["translation"] for row in rows] == expected
    assert all(isinstance(row["alignment"], str) and row["alignment"] for row in rows)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != "b.jsonl"} == {
        name: stamp for name, stamp in before.items() if name != "b.jsonl"
    }  # fmt: skip  the others untouched


def test_a_killed_run_rerun_loses_and_doubles_nothing(saved, alone, tmp_path):
    """The driver SIGKILLed after its first shard: the rerun removes what it left half-written and translates only
    the shards not there, each whole."""
    folder = tmp_path / "in"
    for shard in range(4):  # the last shards long enough that the kill lands before them
        corpus(folder / f"s{shard}", lines=40 if shard < 2 else 400)
        os.replace(folder / f"s{shard}" / "a.txt", folder / f"shard{shard}.txt")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "aayn.cli", "translate", "--model", str(saved[0]), "--input",
               str(folder / "*.txt"), "--output_dir", str(out)]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 120
    while not (out / "shard0.txt").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL  # killed, not finished
    assert (out / "shard0.txt").exists() and not (out / "shard3.txt").exists()  # mid-run: shards still missing
    (out / ".shard3.txt.partial-999999").write_text("half")  # what a killed run leaves (its pid is gone)
    assert aayn(["translate", "--model", str(saved[0]), "--input", str(folder / "*.txt"), "--output_dir",
                 str(out)]) == 0  # fmt: skip
    for shard in range(4):
        lines = lines_of((out / f"shard{shard}.txt").read_text())
        assert lines == [one_line(alone[WORDS[i % len(WORDS)]]) for i in range(40 if shard < 2 else 400)], shard
    assert sorted(p.name for p in out.iterdir()) == [f"shard{i}.txt" for i in range(4)]


def test_bad_shards_and_flags_are_refused_in_one_line(saved, tmp_path, capsys):
    corpus(tmp_path / "in")
    (tmp_path / "in" / "b.jsonl").write_text('{"text": "Two."}\n{broken\n')
    model = ["translate", "--model", str(saved[0])]
    message = fails(capsys, *model, "--input", tmp_path / "in", "--output_dir", tmp_path / "out")
    assert "b.jsonl:2: not a JSON object" in message
    assert not (tmp_path / "out" / "b.jsonl").exists()
    message = fails(capsys, *model, "--input", tmp_path / "in" / "*.csv", "--output_dir", tmp_path / "out")
    assert "no shard there" in message
    message = fails(capsys, *model, "--input", tmp_path / "in", "--output_dir", tmp_path / "o", "--prefix", "p.txt")
    assert "--prefix (it reads a second file line by line)" in message
    message = fails(capsys, *model, "--input", tmp_path / "in")
    assert "--input GLOB_OR_FOLDER and --output_dir OUT go together" in message
    (tmp_path / "in" / "b.jsonl").write_text('{"body": "Two."}\n')
    message = fails(capsys, *model, "--input", tmp_path / "in" / "b.jsonl", "--output_dir", tmp_path / "out")
    assert "b.jsonl:1: no text field 'text'" in message
    (tmp_path / "in" / "b.jsonl").write_text('{"text": "Two."}\n{"text": "Two.\\ud800"}\n')  # a valid JSON escape
    message = fails(capsys, *model, "--input", tmp_path / "in" / "b.jsonl", "--output_dir", tmp_path / "out")
    assert "b.jsonl: line 2 holds a lone surrogate U+D800 at character 5" in message
    assert not (tmp_path / "out" / "b.jsonl").exists()
