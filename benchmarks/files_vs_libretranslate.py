"""The same documents translated by LibreTranslate 1.9.6 (its `/translate_file`, argos-translate-files) and by
`aayn serve` (`aayn.translation.documents`), serving the same models, on loopback: for each format, which of the
document's texts each server left untranslated (the text comes back exactly as it went in) and which it lost (the file's
paragraph count changed), side by side.

The documents are built here with the libraries people make them with (python-docx, python-pptx, odfpy, ebooklib,
srt): a body paragraph, one with bold and italic runs, a table, a header, a footer, a footnote and a comment (.docx,
.odt), a caption, a slide's title, text box, table and notes (.pptx), a text frame (.odp), subtitles, an HTML page and
an EPUB chapter with its table of contents. LibreTranslate runs from a venv of its own, as in
benchmarks/libretranslate_vs.py (tests/scripts/libretranslate_offline.py: MiniSBD replaced by a splitter that keeps
each text whole, offline).

    python benchmarks/files_vs_libretranslate.py --libre_python /tmp/libre/bin/python \\
        --model runs/spm-en-fr --reverse_model runs/spm-fr-en
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scripts"))
from libretranslate_offline import start_libretranslate
from serve_load import start

SENTENCE = "In the beginning God created the heaven and the earth."


def samples(folder: Path) -> list[Path]:
    """One document of each format, written into `folder`."""
    import docx
    import pptx
    from odf import text as odf_text
    from odf.dc import Creator
    from odf.office import Annotation
    from odf.opendocument import OpenDocumentText
    from odf.style import Footer, MasterPage, PageLayout

    paths = []
    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = "The word of the Lord."
    document.sections[0].footer.paragraphs[0].text = "And God saw the light."
    document.add_paragraph(SENTENCE)
    mixed = document.add_paragraph("And God said, ")
    mixed.add_run("Let there be light").bold = True
    mixed.add_run(": and there was ")
    mixed.add_run("light").italic = True
    mixed.add_run(".")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Jesus wept.", "God is love."
    document.add_paragraph("The light shineth in darkness.", style="Caption")
    document.add_comment(document.paragraphs[0].runs, text="God is love.", author="Reviewer")
    paths.append(folder / "sample.docx")
    document.save(paths[-1])
    with_footnote(paths[-1], "And the evening and the morning were the first day.")

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "God is love."
    box = slide.shapes.add_textbox(*(pptx.util.Inches(v) for v in (1, 2, 6, 1))).text_frame
    box.text = SENTENCE
    cells = slide.shapes.add_table(1, 2, *(pptx.util.Inches(v) for v in (1, 4, 6, 1))).table
    cells.cell(0, 0).text, cells.cell(0, 1).text = "Jesus wept.", "The light shineth in darkness."
    slide.notes_slide.notes_text_frame.text = "And God saw the light."
    paths.append(folder / "sample.pptx")
    deck.save(paths[-1])

    odt = OpenDocumentText()
    layout = PageLayout(name="Layout")
    odt.automaticstyles.addElement(layout)
    master = MasterPage(name="Standard", pagelayoutname=layout)
    footer = Footer()
    footer.addElement(odf_text.P(text="And God saw the light."))
    master.addElement(footer)
    odt.masterstyles.addElement(master)
    odt.text.addElement(odf_text.P(text=SENTENCE))
    odt.text.addElement(odf_text.P(text="Jesus wept."))
    comment = Annotation()
    comment.addElement(Creator(text="Reviewer"))
    comment.addElement(odf_text.P(text="God is love."))
    odt.text.lastChild.addElement(comment)
    paths.append(folder / "sample.odt")
    odt.save(str(paths[-1]))

    paths += [odp_sample(folder / "sample.odp"), epub_sample(folder / "sample.epub")]
    (folder / "sample.txt").write_text(f"{SENTENCE} Jesus wept.\n\nGod is love.\n")
    (folder / "sample.html").write_text(f"<html><body><h1>God is love.</h1><p>{SENTENCE} <b>Jesus</b> wept.</p>"
                                        "</body></html>")  # fmt: skip
    (folder / "sample.srt").write_text(f"1\n00:00:01,000 --> 00:00:03,000\n{SENTENCE}\n\n"
                                       "2\n00:00:04,000 --> 00:00:05,000\nJesus wept.\n\n")  # fmt: skip
    paths += [folder / "sample.txt", folder / "sample.html", folder / "sample.srt"]
    return paths


def odp_sample(path: Path) -> Path:
    from odf import text as odf_text
    from odf.draw import Frame, Page, TextBox
    from odf.opendocument import OpenDocumentPresentation
    from odf.presentation import Notes
    from odf.style import MasterPage, PageLayout

    deck = OpenDocumentPresentation()
    layout = PageLayout(name="Layout")
    deck.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    deck.masterstyles.addElement(master)
    page = Page(masterpagename=master)
    for words in (SENTENCE, "Jesus wept."):
        frame = Frame(width="20cm", height="3cm", x="1cm", y="1cm")
        box = TextBox()
        box.addElement(odf_text.P(text=words))
        frame.addElement(box)
        page.addElement(frame)
    notes = Notes()
    frame = Frame(width="20cm", height="3cm", x="1cm", y="1cm")
    box = TextBox()
    box.addElement(odf_text.P(text="And God saw the light."))
    frame.addElement(box)
    notes.addElement(frame)
    page.addElement(notes)
    deck.presentation.addElement(page)
    deck.save(str(path))
    return path


def epub_sample(path: Path) -> Path:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("sample")
    book.set_title("God is love.")
    book.set_language("en")
    chapter = epub.EpubHtml(title="One", file_name="one.xhtml", lang="en")
    chapter.content = f"<h1>Jesus wept.</h1><p>{SENTENCE} <i>And God saw the light.</i></p>"
    book.add_item(chapter)
    book.toc = [epub.Link("one.xhtml", "And God saw the light.", "one")]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", chapter]
    epub.write_epub(str(path), book)
    return path


def with_footnote(path: Path, text: str) -> None:
    footnotes = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:footnotes xmlns:w="http://schemas.'
                 'openxmlformats.org/wordprocessingml/2006/main"><w:footnote w:id="1"><w:p><w:r><w:t>'
                 f"{text}</w:t></w:r></w:p></w:footnote></w:footnotes>")  # fmt: skip
    data = path.read_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
        target.writestr("word/footnotes.xml", footnotes)
    path.write_bytes(out.getvalue())


def texts_of(path: Path) -> list[str]:
    """The paragraphs of a document, wherever they are, as plain text (markup and XML stripped)."""
    data = path.read_bytes()
    if path.suffix in (".txt", ".srt"):
        lines = [line.strip() for line in data.decode().splitlines()]
        return [line for line in lines if re.search(r"[^\W\d_]", line) and "-->" not in line]
    if path.suffix == ".html":
        return [t.strip() for t in re.split(r"<[^>]+>", data.decode()) if re.search(r"[^\W\d_]", t)]
    if path.suffix == ".epub":  # the chapters and the navigation document, and toc.ncx's titles (its <text>s)
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            pages = [archive.read(n).decode() for n in archive.namelist() if n.endswith((".xhtml", ".html"))]
            tables = [archive.read(n).decode() for n in archive.namelist() if n.endswith(".ncx")]
        body = "".join(page.split("<body", 1)[-1] for page in pages)
        titles = [t.strip() for table in tables for t in re.findall(r"<text>([^<]*)</text>", table)]
        return [t.strip() for t in re.split(r"<[^>]+>", body) if re.search(r"[^\W\d_]", t)] + titles
    found = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            if name.endswith(".xml") and re.search(r"(document|header|footer|footnotes|comments|slide|notesSlide|"
                                                   r"content|styles)\d*\.xml$", name):  # fmt: skip
                xml = archive.read(name).decode()
                notes = re.findall(r"<office:annotation\b.*?</office:annotation>", xml, re.DOTALL)  # ODF's comments
                xml = re.sub(r"<office:annotation\b.*?</office:annotation>", "", xml, flags=re.DOTALL) + "".join(notes)
                for paragraph in re.findall(r"<(?:w:p|a:p|text:p|text:h)\b[^>]*>(.*?)</(?:w:p|a:p|text:p|text:h)>",
                                            xml, re.DOTALL):  # fmt: skip
                    text = "".join(re.findall(r">([^<]*)<", f">{paragraph}<")).strip()
                    if re.search(r"[^\W\d_]", text):
                        found.append(text)
    return found


def translate_file(url: str, path: Path, source: str, target: str, out: Path) -> str:
    """POST /translate_file as LibreTranslate's page does, then GET the file: '' or what went wrong."""
    boundary = "----aaynFilesVsLibreTranslate"
    body = b""
    for name, value in (("source", source), ("target", target)):
        body += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
    body += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
             "Content-Type: application/octet-stream\r\n\r\n").encode() + path.read_bytes() + b"\r\n"  # fmt: skip
    body += f"--{boundary}--\r\n".encode()
    request = urllib.request.Request(f"{url}/translate_file", body,
                                     {"Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            link = json.loads(response.read())["translatedFileUrl"]
        with urllib.request.urlopen(link, timeout=600) as response:
            out.write_bytes(response.read())
        return ""
    except Exception as error:  # noqa: BLE001  reported in the table
        detail = error.read().decode()[:200] if hasattr(error, "read") else ""
        return f"{type(error).__name__}: {error} {detail}".strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libre_python", required=True)
    parser.add_argument("--model", required=True, help="an aayn folder with a SentencePiece tokenizer")
    parser.add_argument("--reverse_model", required=True, help="the other direction (LibreTranslate wants two)")
    parser.add_argument("--work", default=tempfile.mkdtemp(prefix="files-vs-"))
    parser.add_argument("--output", help="a JSON file for the table")
    args = parser.parse_args()
    from aayn.cards import card_metadata

    work = Path(args.work)
    (work / "in").mkdir(parents=True, exist_ok=True)
    meta = card_metadata(args.model)
    source, target = meta["source_lang"], meta["target_lang"]
    documents = samples(work / "in")
    servers = {}
    libre, libre_url, log = start_libretranslate(args.libre_python, [args.model, args.reverse_model], work / "libre",
                                                 True, files=True)  # fmt: skip
    if libre is None:
        return 1
    servers["LibreTranslate 1.9.6"] = libre_url
    ours, ours_url = start("--pair", f"{source}:{target}={args.model}")
    servers["aayn serve"] = ours_url
    table = []
    try:
        for path in documents:
            before = texts_of(path)
            row = {"file": path.name, "texts": len(before)}
            for name, url in servers.items():
                out = work / name.split()[0] / path.name
                out.parent.mkdir(exist_ok=True)
                failed = translate_file(url, path, source, target, out)
                if failed:
                    row[name] = {"failed": failed}
                    continue
                after = texts_of(out)
                row[name] = {"untranslated": [text for text in before if text in after],
                             "texts_after": len(after)}  # fmt: skip
            table.append(row)
            print(json.dumps(row, ensure_ascii=False))
    finally:
        libre.terminate()
        libre.wait(timeout=60)
        log.close()
        ours.terminate()
        ours.wait(timeout=60)
    if args.output:
        Path(args.output).write_text(json.dumps(table, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
