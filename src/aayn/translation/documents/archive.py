"""Archives (.docx .odt .pptx .odp .epub are zip files): checked before anything is unpacked, read entry by entry,
written back with every entry as it was (name, order, compression; `mimetype` first and stored, as ODF and EPUB
require) but those translated; XML parsed without entities, DTDs or network (lxml)."""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass

from .core import DocumentError

MAX_UNPACKED = 256 * 1024 * 1024  # bytes all entries may unpack to
MAX_RATIO = 200  # unpacked size over packed size, per entry (text-heavy XML reaches 20-50)
MAX_ENTRIES = 20_000


@dataclass
class Archive:
    """An archive's entries (name: bytes) and their headers, in order."""

    name: str
    infos: list
    entries: dict[str, bytes]

    def rewritten(self, changed: dict[str, bytes]) -> bytes:
        """The archive again, with `changed` entries' bytes replaced."""
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as archive:
            for info in self.infos:
                archive.writestr(info, changed.get(info.filename, self.entries[info.filename]))
        return out.getvalue()


def check(name: str, data: bytes) -> Archive:
    """The archive `data`, read, or DocumentError where it is corrupt or a zip bomb."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise DocumentError(f"{name}: not a valid archive ({error})") from None
    if len(infos) > MAX_ENTRIES:
        raise DocumentError(f"{name}: {len(infos)} entries in the archive, at most {MAX_ENTRIES}")
    total = sum(info.file_size for info in infos)
    if total > MAX_UNPACKED:
        raise DocumentError(f"{name}: would unpack to {total} bytes, at most {MAX_UNPACKED} (a zip bomb?)")
    for info in infos:
        if info.file_size > MAX_RATIO * max(info.compress_size, 1024):
            raise DocumentError(f"{name}: {info.filename} unpacks {info.file_size // max(info.compress_size, 1)} "
                                f"times its size, at most {MAX_RATIO} (a zip bomb?)")  # fmt: skip
    entries = {}
    try:
        for info in infos:
            with archive.open(info) as entry:
                entries[info.filename] = entry.read(info.file_size + 1)
            if len(entries[info.filename]) != info.file_size:  # a header that lies about the size
                raise DocumentError(f"{name}: {info.filename} is not the size its header says")
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        raise DocumentError(f"{name}: a corrupt archive ({error})") from None
    return Archive(name, infos, entries)


def parse_xml(data: bytes, where: str):
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as error:
        raise DocumentError(f"{where}: not well-formed XML ({error})") from None


def xml_bytes(root) -> bytes:
    from lxml import etree

    return etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
