"""The archive formats: Word (.docx: the body, tables, headers and footers, footnotes and endnotes, comments),
PowerPoint (.pptx: every shape's and table's text, slide notes), OpenDocument (.odt, .odp: paragraphs and headings
wherever they are, headers and footers in `styles.xml`, notes, comments) and EPUB (each XHTML document, as
`aayn.translation.markup` reads HTML, and the table of contents' titles). A paragraph's runs keep their formatting
(`core.runs_block`); fields, images, styles and every other entry come back as they were."""

from __future__ import annotations

import re

from ..markup import Fragment
from .archive import Archive, parse_xml, xml_bytes
from .core import Document, Slot, put_runs, runs_block
from .text import decoded

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"

# the parts holding text, per format, and where in them a paragraph is
PARTS = {
    ".docx": re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml"),
    ".pptx": re.compile(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml"),
    ".odt": re.compile(r"(content|styles)\.xml"),
    ".odp": re.compile(r"(content|styles)\.xml"),
}


def read(extension: str, archive: Archive, *, aligned: bool, split) -> Document:
    if extension == ".epub":
        return epub(archive, aligned=aligned, split=split)
    roots = {name: parse_xml(archive.entries[name], f"{archive.name}: {name}")
             for name in archive.entries if PARTS[extension].fullmatch(name)}  # fmt: skip
    blocks, slots = [], []
    for root in roots.values():
        for paragraph in paragraphs(extension, root):
            runs = paragraph_slots(extension, paragraph)
            if any(c.isalpha() for slot in runs for c in slot.text):
                blocks.append(runs_block(runs, aligned=aligned, split=split))
                slots.append(runs)

    def finish(rebuilt: list[str]) -> bytes:
        for runs, text in zip(slots, rebuilt):
            put_runs(runs, text)
        return archive.rewritten({name: xml_bytes(root) for name, root in roots.items()})

    return Document(blocks, finish)


def paragraphs(extension: str, root) -> list:
    if extension == ".docx":
        return list(root.iter(f"{W}p"))
    if extension == ".pptx":
        return list(root.iter(f"{A}p"))
    return [element for element in root.iter(f"{TEXT}p", f"{TEXT}h")]


def paragraph_slots(extension: str, paragraph) -> list[Slot]:
    """The runs of one paragraph, in order (not those of a paragraph inside it: a text box, a note)."""
    if extension in (".docx", ".pptx"):
        ns = W if extension == ".docx" else A
        runs = [run for run in paragraph.iter(f"{ns}r") if _nearest(run, f"{ns}p") is paragraph]
        return [slot for slot in (_ooxml_slot(run, ns) for run in runs) if slot is not None]
    return _odf_slots(paragraph)


def _nearest(element, tag):
    parent = element.getparent()
    while parent is not None and parent.tag != tag:
        parent = parent.getparent()
    return parent


def _ooxml_slot(run, ns: str) -> Slot | None:
    texts = run.findall(f"{ns}t")
    if not texts or not "".join(t.text or "" for t in texts):
        return None

    def put(text: str) -> None:
        texts[0].text = text
        if ns == W:
            texts[0].set(XML_SPACE, "preserve")
        for other in texts[1:]:
            other.text = ""

    return Slot("".join(t.text or "" for t in texts), put)


def _odf_slots(element) -> list[Slot]:
    """ODF's mixed content: the element's text, then each child's (a span or link: its own slots; a note, a frame, a
    line break: kept) and the text after it."""
    slots = []
    if element.text:
        slots.append(Slot(element.text, lambda text, e=element: setattr(e, "text", text)))
    for child in element:
        if child.tag in (f"{TEXT}span", f"{TEXT}a"):
            slots += _odf_slots(child)
        if child.tail:
            slots.append(Slot(child.tail, lambda text, e=child: setattr(e, "tail", text)))
    return slots


def epub(archive: Archive, *, aligned: bool, split) -> Document:
    """Each XHTML document (chapters, EPUB 3's navigation document) as HTML, and the titles of EPUB 2's table of
    contents (`toc.ncx`: the book's title, each entry's label), which readers show in their own menu."""
    names = [name for name in archive.entries if name.lower().endswith((".xhtml", ".html", ".htm"))]
    blocks = [Fragment(decoded(archive.entries[name], "EPUB's XHTML"), aligned=aligned, split=split) for name in names]
    tables = {name: parse_xml(archive.entries[name], f"{archive.name}: {name}")
              for name in archive.entries if name.lower().endswith(".ncx")}  # fmt: skip
    labels = [[Slot(element.text, lambda text, e=element: setattr(e, "text", text))]
              for root in tables.values() for element in root.iter(f"{NCX}text")
              if any(c.isalpha() for c in element.text or "")]  # fmt: skip
    blocks += [runs_block(runs, aligned=aligned, split=split) for runs in labels]

    def finish(rebuilt: list[str]) -> bytes:
        for runs, text in zip(labels, rebuilt[len(names) :]):
            put_runs(runs, text)
        changed = {name: text.encode("utf-8") for name, text in zip(names, rebuilt)}
        return archive.rewritten({**changed, **{name: xml_bytes(root) for name, root in tables.items()}})

    return Document(blocks, finish)
