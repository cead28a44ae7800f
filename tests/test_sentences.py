"""Texts split into sentences (`aayn.translation.sentences`, `aayn.translation.markup` with `split`, `aayn translate
--split_sentences`): the sentences are pysbd's own (the reference: the library called directly) for the languages it
has, sentencex's for the others; the text between them (spaces, line and paragraph breaks, pieces without letters)
comes back exactly; an HTML block splits where no inline element spans the boundary; each sentence translates as it
does alone."""

import pytest

from aayn.translation.markup import Fragment
from aayn.translation.sentences import Sentences, splitter

pysbd = pytest.importorskip("pysbd")
sentencex = pytest.importorskip("sentencex")

TEXT = (
    "  In the beginning God created the heaven and the earth. And God said, Let there be light: and there was "
    "light.  \n\n3.\n\tMr. Smith went to Washington. 2. He came back!\r\nWhy? Because.\n"
)


def pysbd_sentences(line: str, language: str = "en") -> list[str]:
    segmenter = pysbd.Segmenter(language=language, clean=False)
    return [s.strip() for s in segmenter.segment(line) if any(c.isalpha() for c in s)]


def test_sentences_are_the_splitters_and_the_text_between_them_comes_back():
    document = Sentences(TEXT, splitter("en"))
    expected = [s for line in TEXT.split("\n") for s in pysbd_sentences(line)]
    assert document.texts == expected and len(expected) == 6
    assert document.rebuilt(document.texts) == TEXT  # every space, break and number where it was
    marked = document.rebuilt([f"<{i}>" for i in range(len(expected))])
    assert marked == "  <0> <1>  \n\n3.\n\t<2> 2. <3>\r\n<4> <5>\n"  # "2." has no letters: kept as it is
    with pytest.raises(ValueError, match="2 translations for 6 sentences"):
        document.rebuilt(["a", "b"])


def test_without_a_splitter_each_line_is_one_sentence_and_a_rewriting_splitter_gives_way():
    document = Sentences(TEXT)
    assert document.texts == [line.strip() for line in TEXT.split("\n") if any(c.isalpha() for c in line)]
    assert document.rebuilt(document.texts) == TEXT
    rewritten = Sentences("One. Two.", lambda line: [line.upper()])  # not the text's own characters
    assert rewritten.texts == ["One. Two."]


def test_each_language_has_a_splitter_pysbd_where_it_has_rules():
    from pysbd.languages import LANGUAGE_CODES

    from aayn.translation.sentences import PYSBD

    assert set(LANGUAGE_CODES) == PYSBD
    french = "Au commencement, Dieu créa les cieux et la terre. M. Dupont est là. Il dit : « Oui ! » Puis il partit."
    assert Sentences(french, splitter("fr-FR")).texts == pysbd_sentences(french, "fr")
    swahili = "Hapo mwanzo Mungu aliziumba mbingu na nchi. Nchi ilikuwa ukiwa."
    expected = [s.strip() for s in sentencex.segment("sw", swahili) if s.strip()]
    assert Sentences(swahili, splitter("sw")).texts == expected and len(expected) == 2


def test_html_blocks_split_where_no_inline_element_spans_the_boundary():
    html = "<p>God made light. And he said, <b>Let there be</b> a sea. Then <i>he went. And came</i> back.</p>"
    aligned = Fragment(html, aligned=True, split=splitter("en"))
    assert aligned.texts == ["God made light.", "And he said, Let there be a sea.", "Then he went. And came back."]
    plain = Fragment(html, split=splitter("en"))  # every text run alone, split within itself
    assert plain.texts == ["God made light.", "And he said,", "Let there be", "a sea.", "Then", "he went.",
                           "And came", "back."]  # fmt: skip
    assert plain.rebuilt(plain.texts) == html
    unsplit = ["God made light. And he said,", "Let there be", "a sea. Then", "he went. And came", "back."]
    assert Fragment(html).texts == unsplit


def test_aayn_translate_split_sentences_translates_each_sentence_as_alone(saved, finished_run, capsys):
    from cli_helpers import translate_fails

    from aayn.cli import main as aayn
    from aayn.translation.opening import open_translator

    paragraph = "Six one eight.  Two. Zero nine nine five three four."
    pieces = pysbd_sentences(paragraph)
    alone = dict(zip(pieces, open_translator([str(saved[0])]).translate(pieces)))
    assert (
        aayn(["translate", "--model", str(saved[0]), "--split_sentences", "--source_lang", "en", paragraph, "Two."])
        == 0
    )
    first, second = capsys.readouterr().out.splitlines()
    assert first == f"{alone['Six one eight.']}  {alone['Two.']} {alone[pieces[2]]}" and second == alone["Two."]
    message = translate_fails(capsys, "--model", str(saved[0]), "--split_sentences", paragraph)
    assert "--split_sentences: the card of" in message and "names no source language" in message
    message = translate_fails(capsys, "--model", str(saved[0]), "--split_sentences", "--nbest", "2", paragraph)
    assert "--split_sentences translates each line's sentences once" in message
    assert "--source_lang names the language" in translate_fails(capsys, "--model", str(saved[0]), "--source_lang",
                                                                 "en", paragraph)  # fmt: skip
    assert aayn(["translate", "--model", str(finished_run), "--split_sentences", "Two. Six."]) == 0  # its card: en
    assert len(capsys.readouterr().out.splitlines()) == 1
