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


def read_document(name: str, data: bytes, *, aligned: bool, split=None) -> Document:
    """The `Document` of a file called `name` (its extension says the format) holding `data`; `aligned`: the engine
    aligns (inline formatting placed by alignments); `split`: a sentence splitter
    (`aayn.translation.sentences.splitter`)."""
    from . import archive, office, text

    extension = Path(name).suffix.lower()
    if extension not in FORMATS:
        raise DocumentError(f"{Path(name).name}: the format {extension or '(none)'} is not supported "
                            f"(supported: {' '.join(FORMATS)})")  # fmt: skip
    if extension in (".txt", ".srt", ".html", ".htm"):
        return text.read(extension, data, aligned=aligned, split=split)
    entries = archive.check(name, data)
    return office.read(extension, entries, aligned=aligned, split=split)


__all__ = ["FORMATS", "Document", "DocumentError", "read_document"]
