"""`format=html`: the text of an HTML fragment to translate, and the fragment put back together around the
translations. Every tag, attribute, comment, declaration and character reference outside translated text comes back
exactly as it went in; each run of text between two tags is one text to translate (its entities read as the
characters they stand for, and the translation escaped again), so markup stays where it was. Text inside
`<script>`, `<style>`, `<code>` and `<pre>` is kept as it is, and so is text with no letters (spaces, numbers,
punctuation). The standard library's HTML tokenizer only.

Inline markup inside a sentence (`<b>`, `<i>`, `<a href>`, ... `INLINE`): without alignments each piece between
tags is translated on its own. With them (`aligned=True`; an engine that aligns), the sentence is translated whole,
its text without the inline tags, and each inline element is put around the target words aligned to the source
words it wrapped (`place_elements`): from the first to the last of them, within its parent's words and after its
earlier siblings', so that the tags stay well formed whatever the alignment says. An element none of whose words is
aligned wraps the target word at its source words' relative place."""

from __future__ import annotations

import html
from html.parser import HTMLParser

KEPT_ELEMENTS = {"script", "style", "code", "pre"}  # their text is not prose to translate
MAX_INLINE_DEPTH = 300  # inline elements inside each other in one sentence, as placed by alignments
INLINE = {
    "a",
    "abbr",
    "b",
    "bdi",
    "cite",
    "dfn",
    "em",
    "i",
    "kbd",
    "mark",
    "q",
    "s",
    "samp",
    "small",
    "span",
    "strong",
    "sub",
    "sup",
    "time",
    "u",
    "var",
    "font",
}  # fmt: skip  elements inside a sentence


class _Pieces(HTMLParser):
    """The fragment as pieces: ("markup", raw text) kept as is, ("text", raw text) to translate."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.pieces: list[tuple[str, str]] = []
        self.tags: list[str] = []  # the tag name of each start or end tag piece, in order
        self.kept = 0  # open elements whose text is kept

    def _text(self, raw: str) -> None:
        if self.pieces and self.pieces[-1][0] == "text":
            self.pieces[-1] = ("text", self.pieces[-1][1] + raw)
        else:
            self.pieces.append(("text", raw))

    def handle_starttag(self, tag, attrs):
        kind = "open" if tag in INLINE and not self.kept else "markup"
        self.pieces.append((kind, self.get_starttag_text()))
        self.tags.append(tag)
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
            tag = self.pieces[-1][1][2:-1]
            self.pieces[-1] = ("close" if tag in INLINE and not self.kept else "markup", self.rawdata[i:end])
            self.tags.append(tag)
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
    """An HTML fragment split into what is kept and the texts to translate (`texts`, in document order).
    `aligned`: a sentence with inline markup is one text, its elements placed by the alignment (`rebuilt`'s).
    `split` (`aayn.translation.sentences.splitter`): each block's text split into sentences where no inline element
    spans the boundary."""

    def __init__(self, source: str, aligned: bool = False, split=None):
        self.source, self.aligned = source, aligned
        parser = _Pieces()
        parser.feed(source)
        parser.close()
        self.pieces = _paired(parser.pieces) if aligned else [_plain(piece) for piece in parser.pieces]
        depth = _deepest(self.pieces)
        if depth > MAX_INLINE_DEPTH:
            raise ValueError(
                f"the fragment nests {depth} inline elements inside each other; at most {MAX_INLINE_DEPTH}"
            )
        if split is not None:
            self.pieces = _split_sentences(self.pieces, split)
        self.groups = _sentences(self.pieces)  # (first piece, end) of each slot: a text, or a sentence with markup
        self.slots = [group for group in self.groups if _prose("".join(self._texts_of(group)))]
        self.texts = [" ".join(html.unescape("".join(self._texts_of(group))).split()) for group in self.slots]

    def _texts_of(self, group: tuple[int, int]) -> list[str]:
        return [raw for kind, raw in self.pieces[group[0] : group[1]] if kind == "text"]

    def rebuilt(self, translations: list[str], alignments: list | None = None) -> str:
        """The fragment with each text replaced by its translation (escaped; the text's leading and trailing
        spaces kept); a sentence with inline markup gets its elements back around the words `alignments`
        (`aayn.formats.alignment.Alignment`, one per text) links to theirs."""
        pieces = [raw for _, raw in self.pieces]
        for index, ((start, end), translation) in enumerate(zip(self.slots, translations)):
            raw = "".join(pieces[start:end]) if end - start == 1 else "".join(self._texts_of((start, end)))
            lead, trail = raw[: len(raw) - len(raw.lstrip())], raw[len(raw.rstrip()) :]
            if end - start == 1:
                body = html.escape(translation, quote=False)
            else:
                alignment = alignments[index] if alignments else None
                body = place_elements(self.pieces[start:end], translation, alignment)
            pieces[start] = lead + body + trail
            for i in range(start + 1, end):
                pieces[i] = ""
        return "".join(pieces)


def _prose(raw: str) -> bool:
    return any(character.isalpha() for character in html.unescape(raw))


def _plain(piece: tuple[str, str]) -> tuple[str, str]:
    return piece if piece[0] == "text" else ("markup", piece[1])


def _paired(pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Inline tags that open and close within one sentence (no other markup between) stay "open" / "close";
    any other becomes "markup" (a sentence boundary), until every sentence's inline tags pair up."""
    pieces = list(pieces)
    while True:
        changed, stack = False, []
        for i, (kind, raw) in enumerate(pieces):
            if kind == "open":
                stack.append(i)
            elif kind == "close" and stack and _name(pieces[stack[-1]][1]) == _name(raw):
                stack.pop()
            elif kind == "close" or (kind == "markup" and stack):
                for j in [*stack, *([i] if kind == "close" else [])]:
                    pieces[j] = ("markup", pieces[j][1])
                changed, stack = True, []
        for j in stack:
            pieces[j], changed = ("markup", pieces[j][1]), True
        if not changed:
            return pieces


def _deepest(pieces: list[tuple[str, str]]) -> int:
    """The most inline elements open at once (paired "open" / "close" pieces)."""
    depth = deepest = 0
    for kind, _ in pieces:
        depth += (kind == "open") - (kind == "close")
        deepest = max(deepest, depth)
    return deepest


def _name(raw: str) -> str:
    return raw.strip("</>").split()[0].lower()


def _sentences(pieces: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """(start, end) of each text to translate: a text piece alone, or a run of text and paired inline tags."""
    groups, start = [], None
    for i, (kind, _) in enumerate([*pieces, ("markup", "")]):
        if kind in ("text", "open", "close"):
            start = i if start is None else start
            continue
        if start is not None:
            groups.append((start, i))
            start = None
    return groups


def _split_sentences(pieces: list[tuple[str, str]], split) -> list[tuple[str, str]]:
    """`pieces` with an empty markup piece (a boundary for `_sentences`) where `split` starts a sentence and no
    inline element of its group spans the boundary: inside a text run outside every element, or before the element
    (its opening tags) that the sentence starts with; a run the splitter rewrote is left whole."""
    cuts: dict[int, list[int]] = {}  # piece index -> offsets in its text where a sentence starts (0: before it)
    for start, end in _sentences(pieces):
        spans, depth, text, opened = [], 0, "", None  # spans: (piece, first character, depth, cut before)
        for i in range(start, end):
            kind, raw = pieces[i]
            if kind == "open" and depth == 0:
                opened = i  # a sentence starting in this element may start before it
            depth += (kind == "open") - (kind == "close")
            if kind == "text":
                spans.append((i, len(text), depth, opened if depth > 0 else i))
                text += raw
                opened = None
        for offset in _starts(text, split):
            piece, first, depth, before = [span for span in spans if span[1] <= offset][-1]
            if offset > first and depth == 0:
                cuts.setdefault(piece, []).append(offset - first)
            elif offset == first and before is not None and before > start:
                cuts.setdefault(before, []).append(0)
    out = []
    for i, (kind, raw) in enumerate(pieces):
        at = 0
        for offset in cuts.get(i, ()):
            if offset:
                out.append(("text", raw[at:offset]))
            out.append(("markup", ""))
            at = offset
        out.append((kind, raw[at:]))
    return out


def _starts(text: str, split) -> list[int]:
    """Where each sentence of `text` but the first starts (none where the splitter rewrote the text)."""
    cursor, starts = 0, []
    for sentence in split(text):
        sentence = sentence.strip()
        found = text.find(sentence, cursor) if sentence else cursor
        if found < 0:
            return []
        if sentence and cursor:
            starts.append(found)
        cursor = found + len(sentence)
    return starts


def place_elements(pieces: list[tuple[str, str]], translation: str, alignment) -> str:
    """The translation of one sentence (`pieces`: its text and paired inline tags), escaped, with each inline
    element around the target words aligned to the source words it wrapped (well formed whatever the links)."""
    from ..formats.alignment import word_links

    # the source's words (whitespace-separated over the text without tags) and the elements each falls in
    tree = {"children": [], "words": set(), "open": "", "close": ""}
    path, text, owners = [tree], "", []  # owners: per character of the text, the open elements
    for kind, raw in pieces:
        if kind == "open":
            node = {"children": [], "words": set(), "open": raw, "close": ""}
            path[-1]["children"].append(node)
            path.append(node)
        elif kind == "close":
            path.pop()["close"] = raw
        else:
            chunk = html.unescape(raw)
            text += chunk
            owners += [list(path[1:])] * len(chunk)
    index, previous_space = -1, True
    for position, character in enumerate(text):
        if character.isspace():
            previous_space = True
            continue
        if previous_space:
            index += 1
            previous_space = False
        for node in owners[position]:
            node["words"].add(index)
    source_count = index + 1
    targets = translation.split()
    links = word_links(alignment) if alignment is not None else set()
    by_source = {}
    for source, target in links:
        if target < len(targets):
            by_source.setdefault(source, set()).add(target)

    def span(node, low: int, high: int, start: int):
        """The node's target span (first, last), within [low, high] and from `start` on (None: no words)."""
        aligned = sorted(t for s in node["words"] for t in by_source.get(s, ()))
        aligned = [t for t in aligned if max(low, start) <= t <= high]
        if aligned:
            return aligned[0], aligned[-1]
        if not node["words"] or not targets:
            return None
        guess = round(min(node["words"]) / max(source_count, 1) * len(targets))
        guess = min(max(guess, max(low, start)), high)
        return (guess, guess) if max(low, start) <= guess <= high else None

    def empty(node) -> str:
        return node["open"] + "".join(empty(child) for child in node["children"]) + node["close"]

    def render(children, low: int, high: int) -> str:
        """Target words low..high with `children` placed among them."""
        out, at, start = [], low, low
        for child in children:
            where = span(child, low, high, start)
            if where is None:  # no room: the element (and those inside it), empty, where it would have begun
                out.append((at, empty(child)))
                continue
            first, last = where
            for w in range(at, first):
                out.append((w, html.escape(targets[w], quote=False)))
            out.append((first, child["open"] + render(child["children"], first, last) + child["close"]))
            at = start = last + 1
        for w in range(at, high + 1):
            out.append((w, html.escape(targets[w], quote=False)))
        return _joined(out)

    return render(tree["children"], 0, len(targets) - 1)


def _joined(items: list[tuple[int, str]]) -> str:
    """Rendered pieces, each at a target word index: words apart by a space, an empty element against its word."""
    text, last = "", None
    for index, piece in items:
        if text and index != last:
            text += " "
        text += piece
        last = index
    return text
