"""`format=html`: the text of an HTML fragment to translate, and the fragment put back together around the
translations. Every tag, attribute, comment, declaration and character reference outside translated text comes back
exactly as it went in; each run of text between two tags is one text to translate (its entities read as the
characters they stand for, and the translation escaped again), so markup stays where it was. Inline markup inside a
sentence (`<b>`, `<a href>`, `<i>`) therefore splits it: each piece is translated on its own. Text inside
`<script>`, `<style>`, `<code>` and `<pre>` is kept as it is, and so is text with no letters (spaces, numbers,
punctuation). The standard library's HTML tokenizer only."""

from __future__ import annotations

import html
from html.parser import HTMLParser

KEPT_ELEMENTS = {"script", "style", "code", "pre"}  # their text is not prose to translate


class _Pieces(HTMLParser):
    """The fragment as pieces: ("markup", raw text) kept as is, ("text", raw text) to translate."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.pieces: list[tuple[str, str]] = []
        self.kept = 0  # open elements whose text is kept

    def _text(self, raw: str) -> None:
        if self.pieces and self.pieces[-1][0] == "text":
            self.pieces[-1] = ("text", self.pieces[-1][1] + raw)
        else:
            self.pieces.append(("text", raw))

    def handle_starttag(self, tag, attrs):
        self.pieces.append(("markup", self.get_starttag_text()))
        self.kept += tag in KEPT_ELEMENTS

    def handle_startendtag(self, tag, attrs):
        self.pieces.append(("markup", self.get_starttag_text()))

    def handle_endtag(self, tag):
        self.kept -= tag in KEPT_ELEMENTS and self.kept > 0
        self.pieces.append(("end", f"</{tag}>"))

    def parse_endtag(self, i):
        """The end tag as written (the tokenizer hands `handle_endtag` its name in lower case only)."""
        end = super().parse_endtag(i)
        if end > i and self.pieces and self.pieces[-1][0] == "end":
            self.pieces[-1] = ("markup", self.rawdata[i:end])
        return end

    def handle_data(self, data):
        self.pieces.append(("markup", data)) if self.kept else self._text(data)

    def handle_entityref(self, name):
        self.pieces.append(("markup", f"&{name};")) if self.kept else self._text(f"&{name};")

    def handle_charref(self, name):
        self.pieces.append(("markup", f"&#{name};")) if self.kept else self._text(f"&#{name};")

    def handle_comment(self, data):
        self.pieces.append(("markup", f"<!--{data}-->"))

    def handle_decl(self, decl):
        self.pieces.append(("markup", f"<!{decl}>"))

    def handle_pi(self, data):
        self.pieces.append(("markup", f"<?{data}>"))

    def unknown_decl(self, data):  # a CDATA section (the tokenizer hands over its text without the brackets)
        self.pieces.append(("markup", f"<![{data}]]>"))


class Fragment:
    """An HTML fragment split into what is kept and the texts to translate (`texts`, in document order)."""

    def __init__(self, source: str):
        parser = _Pieces()
        parser.feed(source)
        parser.close()
        self.pieces = parser.pieces
        self.slots = [i for i, (kind, raw) in enumerate(self.pieces) if kind == "text" and _prose(raw)]
        self.texts = [" ".join(html.unescape(self.pieces[i][1]).split()) for i in self.slots]

    def rebuilt(self, translations: list[str]) -> str:
        """The fragment with each text replaced by its translation (escaped; the text's leading and trailing
        spaces kept)."""
        pieces = [raw for _, raw in self.pieces]
        for i, translation in zip(self.slots, translations):
            raw = pieces[i]
            lead, trail = raw[: len(raw) - len(raw.lstrip())], raw[len(raw.rstrip()) :]
            pieces[i] = lead + html.escape(translation, quote=False) + trail
        return "".join(pieces)


def _prose(raw: str) -> bool:
    return any(character.isalpha() for character in html.unescape(raw))
