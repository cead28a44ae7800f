"""Documents translated whole (`aayn.translation.documents`, `aayn translate --file`): each format built in the test
with the library people use for it (python-docx, python-pptx, odfpy, ebooklib, srt), translated, and opened again with
the same library: every text translated (body, tables, headers and footers, footnotes, captions, slide notes), every
run's formatting where it was, `.srt` timing and numbers untouched, everything else byte for byte. A stand-in
translation (each text in capitals) shows where the texts went; the real model, through the command line, shows
each sentence translated as it is alone. Corrupt archives and zip bombs are refused in one line."""

import io
import zipfile

import pytest

from aayn.translation.documents import DocumentError, read_document

docx = pytest.importorskip("docx")
pptx = pytest.importorskip("pptx")
pytest.importorskip("odf")
pytest.importorskip("srt")
pytest.importorskip("lxml")


def capitals(name: str, data: bytes, split=None) -> tuple[bytes, list[str]]:
    """The file with each text in capitals (the stand-in translation), and the texts that were translated."""
    document = read_document(name, data, aligned=False, split=split)
    texts = document.texts
    return document.translated([text.upper() for text in texts]), texts


def test_docx_body_tables_headers_footers_footnotes_captions_and_runs():
    from docx.enum.text import WD_ALIGN_PARAGRAPH

    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = "The header line."
    document.sections[0].footer.paragraphs[0].text = "The footer line."
    document.add_heading("A heading here", level=1)
    paragraph = document.add_paragraph("Plain start, ")
    paragraph.add_run("bold words").bold = True
    paragraph.add_run(" and ")
    paragraph.add_run("italic words").italic = True
    paragraph.add_run(" end.")
    paragraph.alignment = WD_ALIGN_PARAGRAPH.CENTER
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Cell one.", "Cell two."
    document.add_paragraph("Figure 1: a caption.", style="Caption")
    numbers = document.add_paragraph("12 345")  # no letters: kept
    document.add_comment(numbers.runs, text="A comment on it.", author="Reviewer")  # python-docx >= 1.2 (pyproject)
    saved = io.BytesIO()
    document.save(saved)
    data = with_footnote(saved.getvalue(), "A footnote text.")

    out, texts = capitals("report.docx", data)
    assert "A footnote text." in texts and "The header line." in texts and "Cell two." in texts
    result = docx.Document(io.BytesIO(out))
    assert result.sections[0].header.paragraphs[0].text == "THE HEADER LINE."
    assert result.sections[0].footer.paragraphs[0].text == "THE FOOTER LINE."
    body = [p.text for p in result.paragraphs]
    assert body == ["A HEADING HERE", "PLAIN START, BOLD WORDS AND ITALIC WORDS END.", "FIGURE 1: A CAPTION.", "12 345"]
    runs = result.paragraphs[1].runs
    assert [(r.text, bool(r.bold), bool(r.italic)) for r in runs] == [
        ("PLAIN START, ", False, False), ("BOLD WORDS", True, False), (" AND ", False, False),
        ("ITALIC WORDS", False, True), (" END.", False, False)]  # fmt: skip
    assert result.paragraphs[1].alignment == WD_ALIGN_PARAGRAPH.CENTER and result.paragraphs[2].style.name == "Caption"
    assert [c.text for c in result.tables[0].rows[0].cells] == ["CELL ONE.", "CELL TWO."]
    assert b"A FOOTNOTE TEXT." in zipfile.ZipFile(io.BytesIO(out)).read("word/footnotes.xml")
    assert [comment.text for comment in result.comments] == ["A COMMENT ON IT."]
    assert [comment.author for comment in result.comments] == ["Reviewer"]
    translated = {"word/document.xml", "word/header1.xml", "word/footer1.xml", "word/footnotes.xml"}
    translated.add("word/comments.xml")
    unchanged(data, out, translated=translated)


def with_footnote(data: bytes, text: str) -> bytes:
    """A .docx with a footnotes part holding one footnote (python-docx writes none), as Word stores it."""
    footnotes = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<w:footnotes xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        f'<w:footnote w:id="1"><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:footnote></w:footnotes>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
        target.writestr("word/footnotes.xml", footnotes)
    return out.getvalue()


def unchanged(before: bytes, after: bytes, translated: set[str]) -> None:
    """Every entry of the archive but the translated ones byte for byte, in the same order."""
    old, new = zipfile.ZipFile(io.BytesIO(before)), zipfile.ZipFile(io.BytesIO(after))
    assert [i.filename for i in old.infolist()] == [i.filename for i in new.infolist()]
    for info in old.infolist():
        if info.filename not in translated:
            assert old.read(info) == new.read(info.filename), info.filename


def test_pptx_shapes_tables_and_slide_notes():
    from pptx.util import Inches

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = "The slide title."
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(4), Inches(1)).text_frame
    box.text = "Some "
    run = box.paragraphs[0].add_run()
    run.text, run.font.bold = "strong text.", True
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    table.cell(0, 0).text, table.cell(0, 1).text = "Left cell.", "Right cell."
    slide.notes_slide.notes_text_frame.text = "The speaker's notes."
    saved = io.BytesIO()
    presentation.save(saved)

    out, _ = capitals("talk.pptx", saved.getvalue())
    result = pptx.Presentation(io.BytesIO(out)).slides[0]
    assert result.shapes.title.text == "THE SLIDE TITLE."
    texts = [shape.text_frame.text for shape in result.shapes if shape.has_text_frame]
    assert "SOME STRONG TEXT." in texts
    frame = next(
        shape.text_frame for shape in result.shapes if shape.has_text_frame and "SOME" in shape.text_frame.text
    )
    assert [(r.text, bool(r.font.bold)) for r in frame.paragraphs[0].runs] == [("SOME ", False), ("STRONG TEXT.", True)]
    cells = next(shape.table for shape in result.shapes if shape.has_table).rows[0].cells
    assert [c.text for c in cells] == ["LEFT CELL.", "RIGHT CELL."]
    assert result.notes_slide.notes_text_frame.text == "THE SPEAKER'S NOTES."


@pytest.mark.parametrize("kind", ["odt", "odp"])
def test_opendocument_paragraphs_spans_headers_and_notes(kind, tmp_path):
    from odf import teletype, text
    from odf.opendocument import OpenDocumentPresentation, OpenDocumentText, load
    from odf.style import Footer as StyleFooter
    from odf.style import MasterPage, PageLayout, Style, TextProperties

    document = OpenDocumentText() if kind == "odt" else OpenDocumentPresentation()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    paragraph = text.P(text="Before ")
    paragraph.addElement(text.Span(stylename=bold, text="the bold part"))
    paragraph.addText(" after it.")
    if kind == "odt":
        layout = PageLayout(name="Layout")
        document.automaticstyles.addElement(layout)
        master = MasterPage(name="Standard", pagelayoutname=layout)
        footer = StyleFooter()
        footer.addElement(text.P(text="The page footer."))
        master.addElement(footer)
        document.masterstyles.addElement(master)
        document.text.addElement(text.H(outlinelevel=1, text="A heading."))
        document.text.addElement(paragraph)
        note = text.Note(noteclass="footnote")
        body = text.NoteBody()
        body.addElement(text.P(text="The footnote."))
        note.addElement(text.NoteCitation(text="1"))
        note.addElement(body)
        document.text.addElement(text.P(text="A sentence with a note."))
        document.text.lastChild.addElement(note)
        from odf.dc import Creator
        from odf.office import Annotation

        comment = Annotation()
        comment.addElement(Creator(text="Reviewer"))
        comment.addElement(text.P(text="A comment on it."))
        document.text.lastChild.addElement(comment)
    else:
        from odf.draw import Frame, Page, TextBox

        master = MasterPage(name="Default", pagelayoutname=PageLayout(name="L"))
        document.masterstyles.addElement(master)
        page = Page(masterpagename=master)
        frame = Frame(width="10cm", height="3cm", x="1cm", y="1cm")
        box = TextBox()
        box.addElement(paragraph)
        frame.addElement(box)
        page.addElement(frame)
        document.presentation.addElement(page)
    path = tmp_path / f"doc.{kind}"
    document.save(str(path))

    out, _ = capitals(path.name, path.read_bytes())
    (tmp_path / f"out.{kind}").write_bytes(out)
    result = load(str(tmp_path / f"out.{kind}"))
    paragraphs = [teletype.extractText(p) for p in result.getElementsByType(text.P)]
    assert "BEFORE THE BOLD PART AFTER IT." in paragraphs
    spans = [teletype.extractText(s) for s in result.getElementsByType(text.Span)]
    assert spans == ["THE BOLD PART"]  # its style kept, its own words in it
    if kind == "odt":
        assert [teletype.extractText(h) for h in result.getElementsByType(text.H)] == ["A HEADING."]
        assert "THE PAGE FOOTER." in paragraphs and "THE FOOTNOTE." in paragraphs and "A COMMENT ON IT." in paragraphs
        assert "Reviewer" in zipfile.ZipFile(io.BytesIO(out)).read("content.xml").decode()  # its author kept
        assert any(p.startswith("A SENTENCE WITH A NOTE.") for p in paragraphs)
    assert zipfile.ZipFile(io.BytesIO(out)).infolist()[0].filename == "mimetype"


def test_srt_timing_untouched_and_txt_html_epub():
    import srt

    subtitles = "1\n00:00:01,000 --> 00:00:02,500\nFirst line\nof a cue.\n\n2\n00:00:03,000 --> 00:00:04,000\nNext.\n\n"
    out, _ = capitals("film.srt", subtitles.encode())
    before, after = list(srt.parse(subtitles)), list(srt.parse(out.decode()))
    assert [(c.index, c.start, c.end) for c in after] == [(c.index, c.start, c.end) for c in before]
    assert [c.content for c in after] == ["FIRST LINE OF A CUE.", "NEXT."]
    text = "  First paragraph. Second sentence.\n\n3.\nLast line.\n"
    assert capitals("notes.txt", text.encode())[0].decode() == text.upper()
    page = "<html><head><title>Title.</title><style>p {color: red}</style></head>"
    page += "<body><p>Hello <b>there</b>.</p></body></html>"
    assert capitals("page.html", page.encode())[0].decode() == page.replace("Title.", "TITLE.").replace(
        "Hello ", "HELLO ").replace("there", "THERE")  # fmt: skip


def test_epub_chapters_and_tables_of_contents_translated_everything_else_kept():
    epub = pytest.importorskip("ebooklib.epub")

    book = epub.EpubBook()
    book.set_identifier("id1")
    book.set_title("A book")
    book.set_language("en")
    chapter = epub.EpubHtml(title="One", file_name="one.xhtml", lang="en")
    chapter.content = "<h1>Chapter one</h1><p>The first <i>page</i>.</p>"
    book.add_item(chapter)
    book.toc = [epub.Link("one.xhtml", "The first chapter", "one")]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", chapter]
    saved = io.BytesIO()
    epub.write_epub(saved, book)
    out, _ = capitals("book.epub", saved.getvalue())
    import ebooklib

    read = epub.read_epub(io.BytesIO(out))
    content = read.get_item_with_href("one.xhtml").get_content().decode()
    assert "CHAPTER ONE" in content and "THE FIRST <i>PAGE</i>." in content
    assert zipfile.ZipFile(io.BytesIO(out)).infolist()[0].filename == "mimetype"
    assert len(list(read.get_items_of_type(ebooklib.ITEM_DOCUMENT))) == 2
    navigation = read.get_item_with_href("nav.xhtml").get_content().decode()  # EPUB 3's table of contents
    assert ">THE FIRST CHAPTER</a>" in navigation
    ncx = read.get_item_with_href("toc.ncx").get_content().decode()  # EPUB 2's: the book's title, each entry's label
    assert "<text>THE FIRST CHAPTER</text>" in ncx and "<text>A BOOK</text>" in ncx and 'src="one.xhtml"' in ncx


def test_bad_files_are_refused_in_one_line():
    with pytest.raises(DocumentError, match="not a valid archive"):
        read_document("broken.docx", b"PK\x03\x04 not really", aligned=False)
    with pytest.raises(DocumentError, match="the format .pdf is not supported"):
        read_document("paper.pdf", b"%PDF", aligned=False)
    with pytest.raises(DocumentError, match=r"blob: the format \(none\) sent as application/pdf is not supported"):
        read_document("blob", b"%PDF", aligned=False, media_type="application/pdf")
    assert read_document("blob", b"Two.", aligned=False, media_type="text/plain").texts == ["Two."]
    with pytest.raises(DocumentError, match="not UTF-8"):
        read_document("latin.txt", "café".encode("latin-1"), aligned=False)
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * (64 * 1024 * 1024))  # 64 MB of zeros in about 64 KB
    with pytest.raises(DocumentError, match="a zip bomb"):
        read_document("bomb.docx", bomb.getvalue(), aligned=False)
    for xml, match in ((b"<w:document>", "not well-formed XML"), (ENTITY, None)):
        packed = io.BytesIO()
        with zipfile.ZipFile(packed, "w") as archive:
            archive.writestr("word/document.xml", xml)
        if match:
            with pytest.raises(DocumentError, match=match):
                read_document("bad.docx", packed.getvalue(), aligned=False)
        else:  # an external entity is neither fetched nor read: its text never reaches the output
            out, texts = capitals("entity.docx", packed.getvalue())
            assert b"root:" not in out and not any("root:" in text for text in texts)


ENTITY = (
    b'<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY secret SYSTEM "file:///etc/passwd">]>'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r>'
    b"<w:t>Read &secret; here.</w:t></w:r></w:p></w:body></w:document>"
)


def test_aayn_translate_file_translates_each_sentence_as_alone(saved, tmp_path, capsys):
    """Through the command line with the real (aligning) engine: each paragraph's sentences as translated alone, a
    bold run carried to words of the translation, the output written whole."""
    from cli_helpers import translate_fails

    from aayn.cli import main as aayn
    from aayn.translation.opening import open_translator

    document = docx.Document()
    document.add_paragraph("Six one eight. Two.")
    paragraph = document.add_paragraph("Zero nine ")
    paragraph.add_run("nine five").bold = True
    paragraph.add_run(" three four.")
    source, target = tmp_path / "in.docx", tmp_path / "out.docx"
    document.save(source)
    assert aayn(["translate", "--model", str(saved[0]), "--source_lang", "en", "--file", str(source),
                 "--output", str(target)]) == 0  # fmt: skip
    from aayn.translation.documents.core import (
        NOT_IN_XML,  # the untrained model emits control characters XML cannot hold
    )

    texts = ["Six one eight.", "Two.", "Zero nine nine five three four."]
    alone = [NOT_IN_XML.sub("", text) for text in open_translator([str(saved[0])]).translate(texts)]
    result = docx.Document(target)
    assert result.paragraphs[0].text == f"{alone[0]} {alone[1]}"
    assert " ".join(result.paragraphs[1].text.split()) == " ".join(alone[2].split())
    assert [bool(r.bold) for r in result.paragraphs[1].runs] == [False, True, False]
    message = translate_fails(capsys, "--model", str(saved[0]), "--file", str(source))
    assert "--file IN and --output OUT go together" in message
    (tmp_path / "x.pdf").write_bytes(b"%PDF")
    message = translate_fails(capsys, "--model", str(saved[0]), "--source_lang", "en", "--file",
                              str(tmp_path / "x.pdf"), "--output", str(tmp_path / "y.pdf"))  # fmt: skip
    assert "the format .pdf is not supported" in message and not (tmp_path / "y.pdf").exists()
