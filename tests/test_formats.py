"""The format registry (`aayn.formats`): every format a `Format` subclass in a module of its own, reachable from
the command line through the registry alone. A toy format (tests/toy_format/, a room: a folder whose engine reverses its
input) registered here is exported, translated, scored and served by the same commands as aayn's own formats."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from server_helpers import Server

from aayn.cli import main as aayn
from aayn.formats import FORMATS, HOME, exports, folder_format, imports, register, unregister

TESTS = Path(__file__).parent


@pytest.fixture
def toy(monkeypatch):
    import toy_format

    if "reversed" not in FORMATS:
        register(toy_format.ReversedFolder())
    yield FORMATS["reversed"]
    unregister("reversed")


def test_each_format_declares_what_its_engine_does_and_the_registry_names_them():
    assert exports() == ("ctranslate2", "onnx", "argos") and imports() == ("fairseq", "marian")
    for name, entry in FORMATS.items():
        assert entry.name == name and entry.title and entry.direction in ("out", "in", "home")
        assert type(entry).__module__.startswith("aayn.formats.")
        if entry.translates:  # the engine's own table of what it does is the format's
            assert entry.engine().abilities <= entry.abilities, name
    assert len({type(entry).__module__ for entry in FORMATS.values()}) == len(FORMATS)  # one room each
    assert folder_format(TESTS / "data") is HOME  # anything else is for aayn's own checks to name


def test_a_folder_is_recognized_by_the_files_its_format_declares(tmp_path):
    """Each translated format's declared files make a folder of it, whatever else it holds (a stray
    model.safetensors does not make an export an aayn folder); a folder holding none is aayn's to check."""
    for name, entry in FORMATS.items():
        if not entry.translates:
            continue
        folder = tmp_path / name
        folder.mkdir()
        for file in (*entry.files, "config.json", "model.safetensors"):
            (folder / file).write_text("{}")
        assert folder_format(folder) is entry, name
        (folder / entry.files[-1]).unlink()
        assert folder_format(folder) is (entry if entry is HOME else HOME), name


def test_reading_the_registry_imports_no_engine_and_no_heavy_library():
    script = "import sys, aayn.formats; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
             "('torch', 'transformers', 'ctranslate2', 'onnxruntime')))"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_registered_format_is_exported_translated_and_scored_through_the_commands(toy, saved, tmp_path, capsys):
    folder = tmp_path / "reversed"
    assert aayn(["export", "--format", "reversed", "--model", str(saved[0]), "--output_dir", str(folder),
                 "--note", "hello"]) == 0  # fmt: skip
    assert json.loads((folder / "reversed.json").read_text())["note"] == "hello"
    assert folder_format(folder) is toy
    capsys.readouterr()
    assert aayn(["translate", "--model", str(folder), "Six one eight.", "", "Two."]) == 0
    assert capsys.readouterr().out.splitlines() == [".thgie eno xiS", "", ".owT"]
    (tmp_path / "s.txt").write_text("abc\nabc\n")
    (tmp_path / "t.txt").write_text("cba\nabc\n")
    assert aayn(["score", "--model", str(folder), "--source", str(tmp_path / "s.txt"),
                 "--target", str(tmp_path / "t.txt")]) == 0  # fmt: skip
    scores = [float(line.split("\t")[0]) for line in capsys.readouterr().out.splitlines()]
    assert scores[0] == 0.0 and scores[1] < 0
    # what its engine cannot do is refused in one line, from the registry's table
    (tmp_path / "p.txt").write_text("x\n")
    assert aayn(["translate", "--model", str(folder), "--prefix", str(tmp_path / "p.txt"), "abc"]) == 2
    assert "is a Reversed model (`aayn export`): it translates without --prefix" in capsys.readouterr().err
    assert aayn(["translate", "--model", str(folder), "--model", str(saved[0]), "abc"]) == 2
    assert "it translates alone" in capsys.readouterr().err
    # a format's own argument given to another format
    assert aayn(["export", "--format", "onnx", "--model", str(saved[0]), "--output_dir", str(tmp_path / "o"),
                 "--note", "x"]) == 2  # fmt: skip
    assert "--note is an argument of reversed, not of onnx" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_registered_format_is_served(toy, saved, tmp_path):
    folder = tmp_path / "reversed"
    assert aayn(["export", "--format", "reversed", "--model", str(saved[0]), "--output_dir", str(folder)]) == 0
    script = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import toy_format; from aayn.cli import main; main()"
    prefix = [sys.executable, "-c", script]
    server = Server(folder, command=prefix)
    try:
        assert server.get("/health")["model"]["type"] == "reversed"
        status, answer, _ = server.post({"inputs": ["Six one eight.", "Two."]})
        assert status == 200 and [row["translation_text"] for row in answer] == [".thgie eno xiS", ".owT"]
    finally:
        server.stop()
