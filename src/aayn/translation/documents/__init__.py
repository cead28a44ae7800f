"""Documents translated whole, as LibreTranslate 1.9 translates files (`aayn translate --file`, `aayn serve`'s
`POST /translate_file`): .txt .html .srt .docx .odt .pptx .odp .epub. Each format reads a file's bytes into a
`Document`: the blocks to translate (a paragraph, a table cell, a header or footer line, a footnote, a caption, a
slide note, a subtitle, an HTML document) and how to write the file back around their translations; everything else
in the file (styles, images, timing, markup) comes back as it was.

A paragraph whose text runs carry different formatting (bold, italic, a link) is one sentence to the model: its runs
are inline elements (`aayn.translation.markup`), placed by the alignment of the sentence translated whole where the
engine aligns, and translated run by run where it does not. Archives (.docx .odt .pptx .odp .epub) are checked before
they are read (`archive.check`): a corrupt one, or one whose entries would unpack past `MAX_UNPACKED` bytes or at a
ratio beyond `MAX_RATIO` (a zip bomb), is refused in one line; their XML is parsed without entities or network."""

from __future__ import annotations

from pathlib import Path

from .core import Document, DocumentError

FORMATS = (".txt", ".html", ".htm", ".srt", ".docx", ".odt", ".pptx", ".odp", ".epub")  # LibreTranslate's, and .htm
# each format's media type (IANA's; .srt has none registered, application/x-subrip is the one in use)
MEDIA_TYPES = {".txt": "text/plain", ".html": "text/html", ".htm": "text/html", ".srt": "application/x-subrip",
               ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
               ".odt": "application/vnd.oasis.opendocument.text",
               ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
               ".odp": "application/vnd.oasis.opendocument.presentation", ".epub": "application/epub+zip"}  # fmt: skip


def format_of(name: str, media_type: str | None = None) -> str:
    """A file's format, as its extension (one of FORMATS): its name's extension where that is one, else the media
    type it was sent as (a browser's `FormData` names a `Blob` "blob", with its type), else DocumentError."""
    extension = Path(name).suffix.lower()
    if extension in FORMATS:
        return extension
    found = next((known for known, media in MEDIA_TYPES.items() if media == (media_type or "").lower()), None)
    if found is None:
        sent = f" sent as {media_type}" if media_type else ""
        raise DocumentError(f"{Path(name).name}: the format {extension or '(none)'}{sent} is not supported "
                            f"(supported: {' '.join(FORMATS)})")  # fmt: skip
    return found


def read_document(name: str, data: bytes, *, aligned: bool, split=None, media_type: str | None = None) -> Document:
    """The `Document` of a file called `name` holding `data`, in the format `format_of` says; `aligned`: the engine
    aligns (inline formatting placed by alignments); `split`: a sentence splitter
    (`aayn.translation.sentences.splitter`)."""
    from . import archive, office, text

    extension = format_of(name, media_type)
    if extension in (".txt", ".srt", ".html", ".htm"):
        return text.read(extension, data, aligned=aligned, split=split)
    entries = archive.check(name, data)
    return office.read(extension, entries, aligned=aligned, split=split)


__all__ = ["FORMATS", "MEDIA_TYPES", "Document", "DocumentError", "format_of", "read_document"]
