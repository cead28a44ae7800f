"""The text formats: .txt (paragraphs, lines and spacing kept; each sentence translated), .srt (each subtitle's text
as one, its number and timing untouched; the `srt` package), .html (the whole document as `aayn.translation.markup`
reads a fragment: every tag, attribute and comment kept, `<script>` and `<style>` untouched)."""

from __future__ import annotations

from ..markup import Fragment
from ..sentences import Sentences
from .core import Document, DocumentError


def decoded(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(f"the {what} file is not UTF-8 text (byte {error.start})") from None


def read(extension: str, data: bytes, *, aligned: bool, split) -> Document:
    source = decoded(data, extension[1:].upper())
    if extension == ".txt":
        return Document([Sentences(source, split)], lambda rebuilt: rebuilt[0].encode("utf-8"))
    if extension in (".html", ".htm"):
        return Document([Fragment(source, aligned=aligned, split=split)], lambda rebuilt: rebuilt[0].encode("utf-8"))
    return subtitles(source, split)


def subtitles(source: str, split) -> Document:
    import srt

    try:
        cues = list(srt.parse(source))
    except (srt.SRTParseError, ValueError) as error:
        raise DocumentError(f"the SRT file cannot be read: {error}") from None
    blocks = [Sentences(" ".join(cue.content.split()), split) for cue in cues]

    def finish(rebuilt: list[str]) -> bytes:
        for cue, text in zip(cues, rebuilt):
            cue.content = text
        return srt.compose(cues, reindex=False).encode("utf-8")

    return Document(blocks, finish)
