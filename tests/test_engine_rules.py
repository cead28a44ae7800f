"""Every engine under the same rules: the torch, CTranslate2 and ONNX engines decode a folder by the rules it states
(`aayn.model.policy_aayn.FOLDER_RULES`, carried by `DecodingSettings`: lp, the length limit a * |x| + b, the stopping
rule) and give the same text, greedy and beam, on an aayn folder and on fairseq folders imported with SentencePiece and
with Moses + BPE (the committed fixtures, trained by fairseq); a search an engine cannot run is refused in one line.
The reference is always the torch engine (§6.1's search in `search_aayn.py`, itself checked against a textbook
search and against fairseq's own outputs) on a folder stating the same rules."""

import json
import shutil

import pytest
from fairseq_helpers import FIXTURES

from aayn.cli import main as aayn
from aayn.formats import export_model, import_fairseq
from aayn.translation.opening import open_translator

pytest.importorskip("ctranslate2")
pytest.importorskip("onnxruntime")

KINDS = ("postnorm-spm", "prenorm-moses-bpe")
NUMBERS = ["Six one eight.", "One two.", "Eight eight six one two.", "Two.", "One six six eight one two eight."]


def with_rules(folder, copy, rules: dict):
    """A copy of the aayn `folder` whose config states `rules` (what an export of it states)."""
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    config.update(rules)
    (copy / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return copy


@pytest.fixture(scope="module")
def folders(saved, tmp_path_factory, onnx_graphs_once):
    """{kind: (the aayn folder, its texts)}, and each kind's CTranslate2 and ONNX exports beside it."""
    root = tmp_path_factory.mktemp("engine-rules")
    made = {"aayn": (saved[0], NUMBERS)}
    for kind in KINDS:
        import_fairseq(FIXTURES / kind / "checkpoint.pt", root / kind, source_lang="en", target_lang="fr")
        record = json.loads((FIXTURES / kind / "fairseq.json").read_text(encoding="utf-8"))
        made[kind] = (root / kind, record["interactive"]["source_texts"])
    for kind, (folder, _) in made.items():
        for form in ("ctranslate2", "onnx"):
            export_model(folder, root / f"{kind}-{form}", format=form)
    return root, made


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize("kind", ["aayn", *KINDS])
@pytest.mark.parametrize("engine", ["ctranslate2", "onnx"])
def test_an_export_translates_as_the_torch_engine_under_the_rules_it_states(folders, engine, kind, beams):
    """Equal text on every sentence (verses for the fairseq models, their default limit of 200 tokens; the untrained
    aayn model's outputs mostly run to §6.1's limit, where CTranslate2's search has to be completed by ours). A
    CTranslate2 folder states CTranslate2's own beam-search rules, fairseq's: the aayn folder stating them too is
    the reference (the imported folders state them already)."""
    root, made = folders
    folder, texts = made[kind]
    exported = root / f"{kind}-{engine}"
    generation = json.loads((exported / "generation_config.json").read_text(encoding="utf-8"))
    if engine == "ctranslate2":
        assert (generation["length_normalization"], generation["search_early_stopping"]) == ("fairseq", True)
        rules = {key: generation[key] for key in ("length_normalization", "search_early_stopping")}
        reference = with_rules(folder, root / f"{kind}-ct2-rules-{beams}", rules)
    else:
        reference = folder
    if kind != "aayn":  # fairseq's default limit, stated by the CTranslate2 export's generation config (the ONNX
        # export keeps the model's config)
        stated = generation if engine == "ctranslate2" else json.loads((exported / "config.json").read_text())
        assert stated["length_limit"] == [0, 200]
    torch_engine, other = open_translator([str(reference)]), open_translator([str(exported)])
    assert torch_engine.settings(num_beams=beams) == other.settings(num_beams=beams)
    nbest = min(beams, 2)
    ours = torch_engine.nbest(texts, nbest, num_beams=beams)
    theirs = other.nbest(texts, nbest, num_beams=beams)
    assert [[text for _, text in each] for each in theirs] == [[text for _, text in each] for each in ours]
    for mine, its in zip(ours, theirs):  # the same scores, log P / lp(|Y|) with |Y| counting eos (float32 sums)
        assert [score for score, _ in its] == pytest.approx([score for score, _ in mine], abs=1e-3)


def test_a_search_ctranslate2_cannot_run_is_refused_in_one_line(folders, tmp_path, capsys):
    """A CTranslate2 folder that states the paper's rules (GNMT's lp, the exact stop: edited in by hand, as no export
    writes them) translates greedily, and refuses a beam search in one line, exit status 2."""
    root, _ = folders
    folder = shutil.copytree(root / "aayn-ctranslate2", tmp_path / "ct2")
    path = folder / "generation_config.json"
    generation = json.loads(path.read_text(encoding="utf-8"))
    generation.update(length_normalization="gnmt", search_early_stopping="never")
    path.write_text(json.dumps(generation), encoding="utf-8")
    assert aayn(["translate", "--model", str(folder), "--num_beams", "1", NUMBERS[0]]) == 0
    capsys.readouterr()
    assert aayn(["translate", "--model", str(folder), "--num_beams", "4", NUMBERS[0]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "CTranslate2 cannot run this search" in err[0] and err[1:] == ["(run with --debug for the traceback)"], err


def test_each_sentence_keeps_its_own_limit_in_every_engine(folders):
    """A sentence's translation does not depend on its batch-mates: each sentence of a mixed batch, translated
    alone, gives the same text, in each engine (the untrained model runs to the limit, so the limits show)."""
    root, made = folders
    folder, texts = made["aayn"]
    for name in (folder, root / "aayn-ctranslate2", root / "aayn-onnx"):
        engine = open_translator([str(name)])
        together = engine.translate(texts, num_beams=4)
        assert together == [engine.translate([text], num_beams=4)[0] for text in texts], name
