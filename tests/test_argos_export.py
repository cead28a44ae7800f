"""`aayn export --format argos`: an Argos Translate package of a model trained with a SentencePiece tokenizer,
installed and run by Argos Translate itself (in a venv of its own: it pulls spaCy, stanza and MiniSBD, which the
test extra does not hold), translating as aayn's own CTranslate2 export does with Argos's search settings."""

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from argos_venv import VENV, argos_venv
from tiny_models import ONCE_ACROSS_LINES
from training_helpers import tiny_recipe, write_numbers_corpus, write_recipe

from aayn.cli import main as aayn
from aayn.formats.argos.writer import ARGOS_SEARCH

pytest.importorskip("ctranslate2")
pytest.importorskip("sentencepiece")

VERSES = ["Six one eight.", "Two.", "Zero nine nine five three four.", "Seven seven.", "Three four five six."]


@pytest.fixture(scope="module")
def spm_run(tmp_path_factory):
    """A tiny model trained with a SentencePiece unigram tokenizer until it ends its sentences."""
    root = tmp_path_factory.mktemp("argos")
    corpus = write_numbers_corpus(root / "numbers")
    recipe = tiny_recipe(corpus, root / "run", tokenizer_type="sentencepiece", vocab_size=48, max_steps=400,
                         eval_strategy="no", generation_num_beams=1, max_predict_samples=4, num_examples_to_print=0,
                         save_strategy="no", warmup_steps=30, generation_max_length=200)  # fmt: skip
    assert aayn(["train", str(write_recipe(root / "r.yaml", recipe))]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def package(spm_run):
    path = spm_run.parent / "en_fr.argosmodel"
    assert aayn(["export", "--format", "argos", "--model", str(spm_run), "--output", str(path)]) == 0
    return path


def test_the_package_is_what_argos_installs(spm_run, package):
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        root = names[0].split("/")[0]
        assert root == "translate-en_fr-1_0" and all(name.startswith(f"{root}/") for name in names)
        metadata = json.loads(archive.read(f"{root}/metadata.json"))
        model_config = json.loads(archive.read(f"{root}/model/config.json"))
        assert archive.read(f"{root}/sentencepiece.model") == (spm_run / "sentencepiece.model").read_bytes()
        assert {f"{root}/model/model.bin", f"{root}/README.md"} <= set(names)
    assert metadata | {"package_version": "1.0", "from_code": "en", "to_code": "fr"} == metadata
    assert (metadata["from_name"], metadata["to_name"]) == ("English", "French")
    assert model_config["add_source_eos"] is True  # Argos's tokenizer gives pieces without </s>
    assert not [path.name for path in package.parent.iterdir() if path.name.startswith(".en_fr")]


def test_a_byte_level_model_is_refused_saying_how_to_train_one_that_exports(tmp_path, capsys):
    corpus = write_numbers_corpus(tmp_path / "numbers")
    recipe = tiny_recipe(corpus, tmp_path / "bpe", max_steps=2, eval_strategy="no", do_predict=False)
    assert aayn(["train", str(write_recipe(tmp_path / "r.yaml", recipe))]) == 0
    capsys.readouterr()
    output = tmp_path / "x.argosmodel"
    assert aayn(["export", "--format", "argos", "--model", str(tmp_path / "bpe"), "--output", str(output)]) == 2
    assert "tokenizer_type: sentencepiece" in capsys.readouterr().err
    assert not output.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".x.argosmodel")]
    assert aayn(["export", "--format", "argos", "--model", str(tmp_path / "bpe"), "--output_dir", "x"]) == 2
    assert "--format argos writes --output FILE.argosmodel" in capsys.readouterr().err


def aayn_ct2_translations(spm_run, tmp_path, **search) -> list[str]:
    from aayn.formats.ctranslate2.engine import ExportedModel

    command = ["export", "--format", "ctranslate2", "--model", str(spm_run), "--output_dir", str(tmp_path / "ct2")]
    assert aayn(command) == 0
    return [hypotheses[0][1] for hypotheses in ExportedModel(tmp_path / "ct2").nbest(VERSES, **search)]


@pytest.fixture(scope="module")
def argos_python():
    """A venv with Argos Translate, made once per test venv (tests/argos_venv.py; .ci/run makes it beside its own)."""
    if not (VENV / "ready").is_file() and not os.environ.get("AAYN_STRICT"):
        pytest.skip("Argos Translate's venv (a few minutes) is made by the README's test command, bash .ci/run, "
                    "which sets AAYN_STRICT=1")  # fmt: skip
    return argos_venv()


ARGOS_SCRIPT = """
import json, os, sys
import argostranslate.package, argostranslate.sbd, argostranslate.translate
# MiniSBD, Argos's sentence splitter, downloads its model at first use: offline, each verse is one sentence
argostranslate.sbd.MiniSBDSentencizer.split_sentences = lambda self, text: [text]
argostranslate.package.install_from_path(sys.argv[1])
print(json.dumps([argostranslate.translate.translate(text, "en", "fr") for text in json.loads(sys.argv[2])]))
"""


def argos_translations(argos_python, package: Path, texts: list[str], tmp_path: Path, beams: int = 1) -> list[str]:
    """Argos Translate's translations of `texts` (en -> fr) by the package, installed in a home of its own."""
    env = dict(
        os.environ,
        ARGOS_PACKAGES_DIR=str(tmp_path / "packages"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        ARGOS_BEAM_SIZE=str(beams),
        HF_HUB_OFFLINE="1",
        ARGOS_COMPUTE_TYPE="float32",
    )  # fmt: skip  Argos's "auto" takes int8 where CTranslate2 has its kernels
    done = subprocess.run([str(argos_python), "-c", ARGOS_SCRIPT, str(package), json.dumps(texts)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@ONCE_ACROSS_LINES  # Argos Translate's own venv: the package it installs does not depend on the line
@pytest.mark.parametrize("beams", [4, 1])
def test_argos_translate_installs_the_package_and_translates_as_aayn(spm_run, package, argos_python, tmp_path, beams):
    """Argos's own search (`ARGOS_SEARCH`): CTranslate2, beam 4 (or `ARGOS_BEAM_SIZE`), length_penalty 0.2;
    aayn's CTranslate2 export with the same settings gives the same text, and greedy equals aayn's torch model."""
    argos = argos_translations(argos_python, package, VERSES, tmp_path, beams)
    assert argos == aayn_ct2_translations(spm_run, tmp_path, **{**ARGOS_SEARCH, "num_beams": beams})
    if beams == 1:
        from aayn.translation.opening import open_translator

        torch_greedy = open_translator([str(spm_run)]).translate(VERSES, num_beams=1)
        assert argos == torch_greedy


@ONCE_ACROSS_LINES
def test_an_imported_fairseq_sentencepiece_folder_exports_to_argos_and_translates_as_aayn(argos_python, tmp_path):
    """`aayn import fairseq` of a SentencePiece model writes `sentencepiece.model` (the name the Argos exporter reads):
    the package installs in Argos Translate and its greedy output equals the imported folder's (up to the length
    limit: this tiny model runs some verses to it)."""
    from aayn.formats import import_fairseq
    from aayn.translation.opening import open_translator

    fixture = Path(__file__).parent / "data" / "fairseq" / "postnorm-spm"
    folder = tmp_path / "imported"
    import_fairseq(fixture / "checkpoint.pt", folder, source_lang="en", target_lang="fr")
    package = tmp_path / "en_fr.argosmodel"
    assert aayn(["export", "--format", "argos", "--model", str(folder), "--output", str(package)]) == 0
    texts = json.loads((fixture / "fairseq.json").read_text(encoding="utf-8"))["interactive"]["source_texts"][:6]
    argos = argos_translations(argos_python, package, texts, tmp_path)
    ours = open_translator([str(folder)]).translate(texts, num_beams=1)
    # equal, but where aayn stops at §6.1's limit (source + 50) and Argos, with a limit of its own, goes on
    assert all(theirs == mine or theirs.startswith(mine) for theirs, mine in zip(argos, ours)), (argos, ours)
    assert sum(theirs == mine for theirs, mine in zip(argos, ours)) >= 3


@ONCE_ACROSS_LINES
def test_an_imported_marian_folder_exports_to_argos_and_translates_as_aayn(argos_python, tmp_path):
    """OPUS-MT's layout (a SentencePiece model a side, one vocabulary): the package holds the source side's, which
    Argos tokenizes with (it joins the target pieces as any pieces); Argos's greedy output equals the folder's."""
    pytest.importorskip("sentencepiece")
    from marian_helpers import tiny_marian

    from aayn.translation.opening import open_translator

    marian = tiny_marian(tmp_path / "marian", steps=200, d_model=32)  # outputs that differ by source
    assert aayn(["import", "marian", str(marian), "--output_dir", str(tmp_path / "imported")]) == 0
    package = tmp_path / "en_fr.argosmodel"
    assert aayn(["export", "--format", "argos", "--model", str(tmp_path / "imported"), "--output", str(package)]) == 0
    with zipfile.ZipFile(package) as archive:
        name = next(n for n in archive.namelist() if n.endswith("/sentencepiece.model"))
        assert archive.read(name) == (marian / "source.spm").read_bytes()
    ours = open_translator([str(tmp_path / "imported")]).translate(VERSES, num_beams=1)
    assert len(set(ours)) > 2 and argos_translations(argos_python, package, VERSES, tmp_path) == ours
