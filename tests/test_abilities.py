"""Every ability × engine pair through the command line: each engine aayn translates (its own folder, the
CTranslate2 and ONNX exports, and a toy registered format) is asked for each ability
(`aayn.formats.translator.ABILITIES`) as a user asks for it, and either does it (exit status 0, an answer) or
refuses in one line naming what it lacks (exit status 2); `aayn serve` of each is asked for what a request can ask (a
glossary, alignments): 200 or a 400 in one line. A cell that works gives what the torch folder gives (an export's
translations, alignments and scores; the toy's by its own rule). Which cell is which comes from the format's declared
abilities, checked here against what the engine really does."""

from pathlib import Path

import pytest

from aayn.cli import main as aayn
from aayn.formats import FORMATS, register, unregister
from aayn.formats.translator import ABILITIES

pytest.importorskip("ctranslate2")
pytest.importorskip("onnxruntime")

TEXT = "Six one eight."


@pytest.fixture(scope="module")
def folders(saved, tmp_path_factory, onnx_graphs_once):
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
        "sampling": ["--sampling", "--sampling_topk", "1"],  # top-1: the greedy output, on every engine that samples
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
        if engine == "reversed":  # the toy's rule: each target token -1 where the target is not the source reversed
            assert numbers(out)[:1] == [-float(len(TEXT) + 1)], out
        elif engine != "aayn":  # an export does what its torch folder does
            assert aayn(asked(ability, folders["aayn"], tmp_path)) == 0
            expected = capsys.readouterr().out
            assert words(out) == words(expected) and numbers(out) == pytest.approx(numbers(expected), abs=1e-4), (
                out, expected)  # fmt: skip
    else:
        assert status == 2
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("(run with --debug")]
        assert len(lines) == 1 and f"it translates without {ABILITIES[ability]}" in lines[0], err
        assert "Traceback" not in err


def numbers(output: str) -> list[float]:
    import re

    return [float(n) for n in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", output)]


def words(output: str) -> str:
    import re

    return re.sub(r"-?\d+\.\d+(?:e-?\d+)?", "N", output)


# what a request to `aayn serve` may ask of an engine beyond translating, as the Hub's shape asks it
SERVED = {"glossary": {"glossary": {"one": "un"}}, "alignment": {"alignment": True}}


@pytest.fixture(scope="module")
def servers(folders):
    """{format name: `aayn serve` of its folder}, one server per engine for the module's cells."""
    import sys

    from server_helpers import Server

    tests = Path(__file__).parent
    script = f"import sys; sys.path.insert(0, {str(tests)!r}); import toy_format; from aayn.cli import main; main()"
    toy = [sys.executable, "-c", script]
    started = {}
    try:
        for engine, folder in folders.items():
            started[engine] = Server(folder, "--max_wait_ms", 1, command=toy if engine == "reversed" else None)
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.mark.parametrize("ability", list(SERVED))
@pytest.mark.parametrize("engine", ["aayn", "ctranslate2", "onnx", "reversed"])
def test_each_engine_serves_each_ability_or_refuses_in_one_line(servers, engine, ability):
    """`aayn serve` asked for a glossary or alignments (the Hub's shape): the translation with it (200), or a 400
    whose one line names what the engine lacks, as the format declares; the server goes on."""
    parameters = {"num_beams": 1, "max_new_tokens": 4, **SERVED[ability]}
    status, answer, _ = servers[engine].post({"inputs": TEXT, "parameters": parameters})
    if ability in FORMATS[engine].abilities:
        assert status == 200, answer
        assert isinstance(answer[0]["translation_text"], str)
        assert ability != "alignment" or "alignment" in answer[0], answer
        if engine != "aayn":  # an export serves what its torch folder serves
            assert answer == servers["aayn"].post({"inputs": TEXT, "parameters": parameters})[1]
    else:
        assert status == 400, answer
        message = answer["error"]
        assert len(message.splitlines()) == 1 and ability in message, message
    assert servers[engine].post({"inputs": TEXT, "parameters": {"max_new_tokens": 4}})[0] == 200


@pytest.mark.parametrize("engine", ["aayn", "ctranslate2", "onnx", "reversed"])
def test_dtype_casts_an_aayn_folders_weights_and_an_export_refuses_it_in_one_line(folders, engine, capsys):
    """`--dtype bfloat16`: the aayn folder's n-best list and scores are those of transformers' own
    `from_pretrained(dtype=torch.bfloat16)` model (not float32's: the scores move); an export, which computes in
    the type it was written in, refuses in one line before loading anything."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    command = ["translate", "--model", str(folders[engine]), "--nbest", "3", "--num_beams", "4",
               "--max_new_tokens", "6", "--dtype", "bfloat16", TEXT]  # fmt: skip
    status = aayn(command)
    out, err = capsys.readouterr()
    if engine != "aayn":
        assert status == 2
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("(run with --debug")]
        assert len(lines) == 1 and "--dtype bfloat16: --model" in lines[0] and "casts an aayn folder" in lines[0], err
        return
    assert status == 0, err[-2000:]
    tokenizer = AutoTokenizer.from_pretrained(folders["aayn"])
    inputs = tokenizer([TEXT], return_tensors="pt")
    expected = {}
    for dtype in (torch.bfloat16, torch.float32):
        model = AutoModelForSeq2SeqLM.from_pretrained(folders["aayn"], dtype=dtype).eval()
        assert {p.dtype for p in model.parameters()} == {dtype}
        found = model.generate(**inputs, num_beams=4, num_return_sequences=3, max_new_tokens=6,
                               return_dict_in_generate=True, output_scores=True)  # fmt: skip
        expected[dtype] = (tokenizer.batch_decode(found.sequences, skip_special_tokens=True),
                           found.sequences_scores.tolist())  # fmt: skip
    texts, scores = expected[torch.bfloat16]
    assert numbers(out) == pytest.approx(scores, abs=1e-5), (out, expected)
    assert all(text.strip() in out for text in texts), (out, texts)
    assert numbers(out) != pytest.approx(expected[torch.float32][1], abs=1e-4)  # the weights were cast


@pytest.mark.parametrize("engine", ["aayn", "ctranslate2", "onnx", "reversed"])
def test_cuda_graphs_reach_an_aayn_folders_search_and_an_export_refuses_them_in_one_line(
    folders, engine, capsys, monkeypatch, tmp_path
):
    """`--cuda_graphs` (with --device cuda; refused in one line on a CPU, and by `aayn score`, which runs no
    search) reaches the search of an aayn folder's translator: its static steps (`aayn.formats.aayn.cuda_graphs`, run
    eagerly off CUDA) translate as the plain steps do; an export, whose engine runs its own steps, refuses them in one
    line
    before anything is loaded."""
    from aayn.formats.aayn.cuda_graphs import GraphedSteps
    from aayn.formats.translator import EngineOptions
    from aayn.translation.opening import open_translator

    command = ["translate", "--model", str(folders[engine]), "--cuda_graphs", TEXT]
    assert aayn(command) == 2
    assert "--cuda_graphs replays the decoder's steps on a GPU: give --device cuda, not cpu" in capsys.readouterr().err
    if engine != "aayn":
        assert aayn([*command[:-1], "--device", "cuda", TEXT]) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("(run with --debug")]
        assert len(lines) == 1 and f"--cuda_graphs: --model {folders[engine]} is" in lines[0], err
        return
    scored = asked("scores", folders["aayn"], tmp_path)  # scoring runs no search: refused too
    assert aayn([*scored, "--device", "cuda", "--cuda_graphs"]) == 2
    assert "--cuda_graphs runs a search's decoder steps otherwise: aayn score runs no search" in capsys.readouterr().err
    made, start = [], GraphedSteps.__init__
    monkeypatch.setattr(GraphedSteps, "__init__", lambda self, *args: made.append(start(self, *args)))
    texts = [TEXT, "Two.", "Zero nine nine five three four."]
    graphed = open_translator([str(folders["aayn"])], options=EngineOptions(cuda_graphs=True))
    best = graphed.nbest(texts, 2, num_beams=3, max_new_tokens=8)
    assert made  # the search took the static steps
    plain = open_translator([str(folders["aayn"])]).nbest(texts, 2, num_beams=3, max_new_tokens=8)
    assert [[text for _, text in row] for row in best] == [[text for _, text in row] for row in plain]
    assert [score for row in best for score, _ in row] == pytest.approx([s for row in plain for s, _ in row], abs=1e-5)


@pytest.mark.parametrize("engine", ["aayn", "ctranslate2"])
def test_compiled_steps_reach_an_aayn_folders_generate_and_an_export_refuses_them_in_one_line(
    folders, engine, capsys, tmp_path
):
    """`--compiled_steps` becomes `generate(compiled_steps=True)` for an aayn folder (mutation caught: the engine
    dropping the option), is refused in one line, before loading, by an export whose engine runs its own steps
    (mutation caught: the format's refusal skipped) and by `aayn score`, which runs no search."""
    from aayn.formats.translator import DecodingSettings, EngineOptions
    from aayn.translation.opening import open_translator

    command = ["translate", "--model", str(folders[engine]), "--compiled_steps", TEXT]
    if engine != "aayn":
        assert aayn(command) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("(run with --debug")]
        assert len(lines) == 1 and f"--compiled_steps: --model {folders[engine]} is" in lines[0], err
        return
    assert aayn([*asked("scores", folders["aayn"], tmp_path), "--compiled_steps"]) == 2
    assert "--compiled_steps runs a search's decoder steps otherwise: aayn score" in capsys.readouterr().err
    compiled = open_translator([str(folders["aayn"])], options=EngineOptions(compiled_steps=True))
    assert compiled.generate_options(DecodingSettings(3, 1.0))["compiled_steps"] is True
    plain = open_translator([str(folders["aayn"])])
    assert "compiled_steps" not in plain.generate_options(DecodingSettings(3, 1.0))
