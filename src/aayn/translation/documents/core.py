"""What every format shares: a `Document` (its blocks' texts to translate, and the file written back around their
translations), and the block of a paragraph whose runs carry formatting (`Runs`)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from html.parser import HTMLParser

from ..markup import Fragment


class DocumentError(ValueError):
    """What is wrong with a file (corrupt, too big, of a format not supported), in one line."""


class Document:
    """`blocks`: each has `texts` (what to translate) and `rebuilt(translations, alignments)` (`Fragment`,
    `aayn.translation.sentences.Sentences`); `finish`: from each block's rebuilt text, the translated file's bytes."""

    def __init__(self, blocks: list, finish: Callable[[list[str]], bytes]):
        self.blocks, self.finish = blocks, finish

    @property
    def texts(self) -> list[str]:
        return [text for block in self.blocks for text in block.texts]

    def translated(self, translations: list[str], alignments: list | None = None) -> bytes:
        """The file with every text replaced by its translation (in `texts` order; `alignments` where the engine
        aligns, one per text)."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        rebuilt, start = [], 0
        for block in self.blocks:
            end = start + len(block.texts)
            rebuilt.append(block.rebuilt(translations[start:end], alignments[start:end] if alignments else None))
            start = end
        return self.finish(rebuilt)


NOT_IN_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # characters XML 1.0 cannot hold


class Slot:
    """One run of a paragraph: its text, and how to set it (an XML element's text or tail, a run's `w:t`); a
    translation's characters that XML cannot hold (a model may emit control characters) are dropped."""

    def __init__(self, text: str, put: Callable[[str], None]):
        self.text, self._put = text, put

    def put(self, text: str) -> None:
        self._put(NOT_IN_XML.sub("", text))


def runs_block(slots: list[Slot], *, aligned: bool, split) -> Fragment:
    """A paragraph's runs as one HTML fragment, each run a `<span>` (inline: with alignments the paragraph is
    translated whole and each run's words placed where their translation went)."""
    if len(slots) == 1:  # one run: the text alone
        return Fragment(html.escape(slots[0].text, quote=False), aligned=aligned, split=split)
    marked = "".join(f'<span data-run="{i}">{html.escape(s.text, quote=False)}</span>' for i, s in enumerate(slots))
    return Fragment(marked, aligned=aligned, split=split)


def put_runs(slots: list[Slot], rebuilt: str) -> None:
    """Each run's text from the translated fragment: a span's words to its run; words outside every span to the run
    before them (the first run, at the start)."""
    if len(slots) == 1:
        slots[0].put(html.unescape(rebuilt))
        return
    reader = _Spans()
    reader.feed(rebuilt)
    reader.close()
    texts = [""] * len(slots)
    last = None
    for run, text in reader.pieces:
        if run is None:
            run = last if last is not None else 0
        texts[run] += text
        last = run
    for slot, text in zip(slots, texts):
        slot.put(text)


class _Spans(HTMLParser):
    """(run index or None, text) of a translated fragment of runs."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.pieces: list[tuple[int | None, str]] = []
        self.open: list[int | None] = []

    def handle_starttag(self, tag, attrs):
        run = dict(attrs).get("data-run")
        self.open.append(int(run) if run is not None and run.isdigit() else (self.open[-1] if self.open else None))

    def handle_endtag(self, tag):
        if self.open:
            self.open.pop()

    def handle_data(self, data):
        self.pieces.append((self.open[-1] if self.open else None, data))
