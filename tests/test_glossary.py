"""Glossaries where users work (glossary_aayn.py): which terms apply to a sentence, the file and request forms and
their faults, and the target terms in the translations (of an untrained model: a term may run into the words
around it) of `aayn translate --glossary`, `aayn serve`'s `glossary`
field (both request shapes, worker processes) and the pipeline's `glossary` keyword."""

import json
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest
from server_helpers import Server

from aayn.model.glossary_aayn import Glossary

GLOSSARY = Glossary((("New York", "Nouvelle-Zorque"), ("York", "Yorque"), ("one", "zzunn"), ("Two", "zzdeux")))


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("From New York to York.", ["Nouvelle-Zorque", "Yorque"]),  # the longer term first, then the other
        ("New York, New York.", ["Nouvelle-Zorque"]),  # each term once
        ("one Two one", ["zzunn", "zzdeux"]),  # several terms, in the glossary's order
        ("new york; Yorker; none; two", []),  # case as written, whole words only
        ("", []),
    ],
)
def test_the_terms_of_a_sentence_are_its_source_terms_words_in_a_row(text, terms):
    assert GLOSSARY.terms_for(text) == terms


def test_a_glossary_file_and_a_request_s_glossary_read_the_same(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("# source<TAB>target\nNew York\tNouvelle-Zorque\n\nYork\tYorque\none\tzzunn\nTwo\tzzdeux\n")
    assert Glossary.read(path) == GLOSSARY
    pairs = [list(entry) for entry in GLOSSARY.entries]
    for given in (dict(GLOSSARY.entries), pairs, json.dumps(pairs), path.read_text(), str(path)):
        assert Glossary.parse(given) == GLOSSARY
    with pytest.raises(ValueError, match="an object"):
        Glossary.parse(str(path), files=False)  # a request never names a file on the server


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("one two\n", "line 1: a glossary line is `source term<TAB>target term`, got 'one two'"),
        ("one\ttwo\tthree\n", "line 1: a glossary line is"),
        ("one\t \n", "line 1: a glossary line is"),
        ("one\tun\none\tune\n", "glossary entry 2: 'one' is given twice, as 'un' and as 'une'"),
        ("...\t\u00a0x\n", None),  # punctuation is a word too: accepted
    ],
)
def test_a_bad_glossary_file_is_refused_naming_its_line(tmp_path, content, message):
    path = tmp_path / "terms.tsv"
    path.write_text(content)
    if message is None:
        assert Glossary.read(path).entries == (("...", "x"),)
        return
    with pytest.raises(ValueError) as caught:
        Glossary.read(path)
    assert str(caught.value).startswith(f"{path}") and message in str(caught.value)


def test_the_translator_puts_the_terms_in_and_leaves_other_sentences_alone(saved):
    from aayn.formats.aayn.engine import TorchTranslator

    folder, model, tokenizer = saved
    translator = TorchTranslator([model], tokenizer, str(folder))
    texts = ["one two three", "Two and one.", "four five", "New York"]
    plain = translator.nbest(texts, 2)
    with_terms = translator.nbest(texts, 2, glossary=GLOSSARY)
    assert "zzunn" in with_terms[0][0][1]
    assert all(term in with_terms[1][0][1] for term in ("zzunn", "zzdeux"))
    assert "Nouvelle-Zorque" in with_terms[3][0][1]
    assert with_terms[2] == plain[2]  # no term applies: as without a glossary
    for hypotheses in with_terms[:2]:  # every hypothesis returned holds the terms
        assert all("zzunn" in text for _, text in hypotheses)


def test_aayn_translate_glossary(saved, tmp_path, capsys):
    from cli_helpers import translate_fails

    from aayn.cli import main as aayn

    path = tmp_path / "terms.tsv"
    path.write_text("one\tzzunn\n")
    assert aayn(["translate", "--model", str(saved[0]), "--glossary", str(path), "one two", "three"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "zzunn" in lines[0] and "zzunn" not in lines[1]
    path.write_text("one zzunn\n")
    message = translate_fails(capsys, "--model", str(saved[0]), "--glossary", str(path), "one")
    assert "line 1: a glossary line is `source term<TAB>target term`" in message


def test_an_export_refuses_a_glossary_in_one_line(saved, tmp_path):
    pytest.importorskip("ctranslate2")
    from aayn.formats import export_model
    from aayn.translation.opening import open_translator

    folder = export_model(saved[0], tmp_path / "ct2")
    with pytest.raises(ValueError, match="it translates without --glossary"):
        open_translator([str(folder)], needs=("glossary",))


@pytest.mark.parametrize("workers", [1, 2])
def test_aayn_serve_takes_a_glossary_and_gives_alignments_in_both_shapes(saved, workers):
    from aayn.formats.aayn.engine import TorchTranslator
    from aayn.formats.alignment import AlignmentSettings

    folder, model, tokenizer = saved
    translator = TorchTranslator([model], tokenizer)
    local = translator.nbest(["one two", "three"], 1, alignment=AlignmentSettings())
    alone = translator.nbest(["three"], 1, alignment=AlignmentSettings())[0][0]
    server = Server(None, "--pair", f"en:fr={folder}", "--workers", workers, "--max_wait_ms", 5, "--max_chars", 20000)
    try:
        status, answer, _ = server.post({"q": ["one two", "three"], "source": "en", "target": "fr", "alignment": True})
        assert status == 200, answer
        assert answer["alignment"] == [[hypotheses[0][2].as_dict()] for hypotheses in local]
        status, answer, _ = server.post({"inputs": "three", "parameters": {"alignment": True}})
        assert answer == [{"translation_text": alone[1], **alone[2].as_dict()}]
        status, answer, _ = server.post({"inputs": "three", "parameters": {"alignment": "yes"}})
        assert status == 400 and "alignment must be true or false" in answer["error"]
        status, answer, _ = server.post(
            {"q": ["one two", "three"], "source": "en", "target": "fr", "glossary": {"one": "zzunn"}}
        )
        assert status == 200, answer
        assert "zzunn" in answer["translatedText"][0] and "zzunn" not in answer["translatedText"][1]
        form = urllib.parse.urlencode({"q": "Two", "source": "en", "target": "fr", "glossary": "Two\tzzdeux"})
        status, answer, _ = server.post(form.encode(), raw=True, content_type="application/x-www-form-urlencoded")
        assert status == 200 and "zzdeux" in answer["translatedText"]
        status, answer, _ = server.post({"inputs": ["one", "Two"], "parameters": {"glossary": [["Two", "zzdeux"]]}})
        assert status == 200 and "zzdeux" in answer[1]["translation_text"]
        for bad in ({"one": ""}, "not a glossary", 5):
            status, answer, _ = server.post({"q": "one", "source": "en", "target": "fr", "glossary": bad})
            assert status == 400 and "glossary" in answer["error"], answer
        status, answer, _ = server.post({"inputs": "one", "parameters": {"glossary": [["one"]]}})
        assert status == 400 and "glossary" in answer["error"]
        # what no search can hold is the request's fault, named in one line (400), its batch-mates translated
        bad = [
            ({"q": ["three", "one"], "source": "en", "target": "fr", "glossary": {"one": "</s>"}},
             "input 2 asks for the glossary target '</s>', which holds the special token '</s>'"),
            ({"q": "one", "source": "en", "target": "fr", "glossary": {"one": " ".join(["zzunn"] * 1200)}},
             "input 1 asks for glossary targets of"),
            ({"q": "<b>" * 2000 + "one" + "</b>" * 2000, "source": "en", "target": "fr", "format": "html"},
             "q (format=html): the fragment nests 2000 inline elements inside each other; at most 300"),
        ]  # fmt: skip
        good = {"q": ["one two", "three"], "source": "en", "target": "fr", "glossary": {"one": "zzunn"}}
        with ThreadPoolExecutor(2 * len(bad)) as pool:
            answers = list(pool.map(server.post, [body for body, _ in bad] + [good] * len(bad)))
        for (status, answer, _), (_, message) in zip(answers, bad):
            assert status == 400 and message in answer["error"] and len(answer["error"].splitlines()) == 1, answer
        for status, answer, _ in answers[len(bad) :]:
            assert status == 200 and "zzunn" in answer["translatedText"][0], answer
    finally:
        code, stderr = server.stop()
    assert code == 0, stderr[-3000:]


def test_the_pipeline_takes_a_glossary(saved):
    from transformers import pipeline

    translate = pipeline("translation", model=str(saved[0]), trust_remote_code=True)
    texts = ["one two", "three", "Two"]
    glossary = {"one": "zzunn", "Two": "zzdeux"}
    for batch_size in (1, 3):
        out = [row["translation_text"] for row in translate(texts, glossary=glossary, batch_size=batch_size)]
        assert "zzunn" in out[0] and "zzdeux" in out[2]
        assert out[1] == translate("three")[0]["translation_text"]
