"""Every ability × engine pair through the command line: each engine aayn translates (its own folder, the
CTranslate2 and ONNX exports, and a toy registered format) is asked for each ability (`aayn.translator.ABILITIES`)
as a user asks for it, and either does it (exit status 0, an answer) or refuses in one line naming what it lacks
(exit status 2). Which cell is which comes from the format's declared abilities, checked here against what the
engine really does."""

import pytest

from aayn.cli import main as aayn
from aayn.formats import FORMATS, register, unregister
from aayn.translator import ABILITIES

pytest.importorskip("ctranslate2")
pytest.importorskip("onnxruntime")

TEXT = "Six one eight."


@pytest.fixture(scope="module")
def folders(saved, tmp_path_factory):
    """{format name: a folder of it}: the tiny saved model, its two exports, and the toy format's."""
    import toy_format

    root = tmp_path_factory.mktemp("abilities")
    if "reversed" not in FORMATS:
        register(toy_format.ReversedFolder())
    made = {"aayn": saved[0]}
    for name in ("ctranslate2", "onnx", "reversed"):
        assert aayn(["export", "--format", name, "--model", str(saved[0]), "--output_dir", str(root / name)]) == 0
        made[name] = root / name
    yield made
    unregister("reversed")


def asked(ability: str, folder, tmp_path) -> list[str]:
    """The command line that asks `folder` for `ability`."""
    (tmp_path / "one.txt").write_text(f"{TEXT}\n", encoding="utf-8")
    if ability == "scores":
        return ["score", "--model", str(folder), "--source", str(tmp_path / "one.txt"),
                "--target", str(tmp_path / "one.txt")]  # fmt: skip
    extra = {
        "prefixes": ["--prefix", str(tmp_path / "one.txt")],
        "attention": ["--show_attention", str(tmp_path / "drawn.png")],
        "glossary": ["--glossary", str(tmp_path / "terms.tsv")],
        "alignment": ["--print_alignment", "json"],
    }[ability]
    (tmp_path / "terms.tsv").write_text("one\tun\n", encoding="utf-8")
    return ["translate", "--model", str(folder), "--num_beams", "1", "--max_new_tokens", "4", *extra, TEXT]


@pytest.mark.parametrize("ability", list(ABILITIES))
@pytest.mark.parametrize("engine", ["aayn", "ctranslate2", "onnx", "reversed"])
def test_each_engine_does_each_ability_or_refuses_in_one_line(folders, engine, ability, tmp_path, capsys):
    entry = FORMATS[engine]
    status = aayn(asked(ability, folders[engine], tmp_path))
    out, err = capsys.readouterr()
    if ability in entry.abilities:
        assert status == 0, err[-2000:]
        assert out.strip() or (tmp_path / "drawn.png").is_file()
    else:
        assert status == 2
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("(run with --debug")]
        assert len(lines) == 1 and f"it translates without {ABILITIES[ability]}" in lines[0], err
        assert "Traceback" not in err
