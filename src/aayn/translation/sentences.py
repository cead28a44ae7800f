"""Texts split into sentences for a sentence-level model, and put back together around the translations with the
text's own whitespace, line breaks and paragraph breaks. A model trained on sentences (verses, WMT's lines) given
a paragraph whole translates it badly (short, and its sentences bleed into each other), so `aayn serve` splits what
LibreTranslate's clients send, as LibreTranslate does, and `aayn translate --split_sentences` splits a document
given as a paragraph a line.

The splitters are rule-based and offline (nothing is downloaded at first use): pysbd (the Golden Rules; 23 languages,
among them en, fr, de, es, it, ru, zh, ja, ar) where it has the language's rules, else sentencex (Wikimedia's; every
language, through fallback chains). A line is split on its own (a line break always ends a sentence); a piece
without letters (a number, a bullet, punctuation) is kept as it is, not translated."""

from __future__ import annotations

import functools
from collections.abc import Callable

Split = Callable[[str], list[str]]
PYSBD = frozenset(
    {
        "am",
        "ar",
        "bg",
        "da",
        "de",
        "el",
        "en",
        "es",
        "fa",
        "fr",
        "hi",
        "hy",
        "it",
        "ja",
        "kk",
        "mr",
        "my",
        "nl",
        "pl",
        "ru",
        "sk",
        "ur",
        "zh",
    }
)  # fmt: skip  pysbd.languages.LANGUAGE_CODES (checked by the tests)


def base_language(code: str) -> str:
    """`pt-BR`, `zh_Hant`, `EN` -> the splitters' two- or three-letter code."""
    return code.replace("_", "-").split("-")[0].lower()


@functools.lru_cache(maxsize=64)
def splitter(language: str) -> Split:
    """The sentence splitter of `language` (a code): a function from one line of text to its sentences."""
    code = base_language(language)
    if code in PYSBD:
        try:
            import pysbd
        except ImportError as error:
            raise ImportError("splitting sentences needs pysbd and sentencex: pip install 'aayn[sentences]'") from error
        segmenter = pysbd.Segmenter(language=code, clean=False)
        return lambda line: list(segmenter.segment(line))
    try:
        from sentencex import segment
    except ImportError as error:
        raise ImportError("splitting sentences needs pysbd and sentencex: pip install 'aayn[sentences]'") from error
    return lambda line: list(segment(code, line))


def has_letters(text: str) -> bool:
    return any(c.isalpha() for c in text)


class Sentences:
    """A plain text as the sentences to translate (`texts`, in order) and the text between them, kept as it is:
    each line's leading and trailing spaces, the spaces between sentences, line and paragraph breaks, and lines or
    pieces without letters. `split`: one line's sentences (None: each line with letters is one sentence)."""

    def __init__(self, source: str, split: Split | None = None):
        self.source = source
        self.kept: list[str] = []  # kept[i] comes before texts[i]; kept[-1] ends the text
        self.texts: list[str] = []
        between = ""
        for number, line in enumerate(source.split("\n")):
            between += "\n" if number else ""
            cursor = 0
            for start, end in self._spans(line, split) if has_letters(line) else []:
                self.kept.append(between + line[cursor:start])
                self.texts.append(line[start:end])
                between, cursor = "", end
            between += line[cursor:]
        self.kept.append(between)

    @staticmethod
    def _spans(line: str, split: Split | None) -> list[tuple[int, int]]:
        """(start, end) of each sentence of `line` with letters, stripped. A splitter whose sentences cannot all be
        found in the line in order (one that rewrote the text) gives way to the whole line as one sentence."""
        whole = [(len(line) - len(line.lstrip()), len(line.rstrip()))]
        if split is None:
            return whole
        spans, cursor = [], 0
        for sentence in split(line):
            sentence = sentence.strip()
            if not sentence:
                continue
            start = line.find(sentence, cursor)
            if start < 0:
                return whole
            cursor = start + len(sentence)
            if has_letters(sentence):
                spans.append((start, cursor))
        return spans or whole

    def rebuilt(self, translations: list[str], alignments=None) -> str:
        """The text with each sentence replaced by its translation (in `texts` order; `alignments` are not needed:
        the signature is `aayn.translation.markup.Fragment`'s)."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} sentences")
        return "".join(kept + text for kept, text in zip(self.kept, translations)) + self.kept[-1]
