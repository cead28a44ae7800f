"""LibreTranslate 1.9's document translation on `aayn serve`: `POST /translate_file` (a multipart form: `file`,
`source` or `auto`, `target`, `api_key`) answers `{"translatedFileUrl": ".../download_file/NAME"}`, and
`GET /download_file/NAME` the translated file, as an attachment under the name it was sent with. Its errors in its
words: `Invalid request: missing file parameter` (and source, target), `Invalid request: empty file`, `Invalid
request: file format not supported`, `XX is not supported`; with `--disable_files_translation`, 403 on
`/translate_file` and 400 on `/download_file` (`Files translation are disabled on this server.`).

The translated files live in a folder of the server's own (made at start, removed at exit) under names it made (a
random hex and the extension); a name a client sends is only looked up among those issued, never joined to a path
(an unknown, expired or crafted name: 400 `Invalid filename`). A file expires `files_expire_s` after it was written
and is deleted at the next file request. A file over `max_file_bytes`, a corrupt archive or a zip bomb gets a 400
and the server goes on (`aayn.translation.documents`)."""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

from .settings import Limits, RequestError

DISABLED = "Files translation are disabled on this server."  # LibreTranslate's words
CHUNK = 64  # sentences handed to the batcher at a time: a long document shares the server with other clients


class Files:
    """The translated files this server issued: name -> (path, the name to download it as, when it expires)."""

    def __init__(self, expire_s: float):
        self.folder = Path(tempfile.mkdtemp(prefix="aayn-files-"))
        self.expire_s = expire_s
        self.issued: dict[str, tuple[Path, str, float]] = {}
        self.lock = threading.Lock()

    def store(self, data: bytes, original: str, extension: str) -> str:
        """The name `data` is issued under: a random hex and `extension` (the format it was read in)."""
        self.purge()
        name = f"{uuid.uuid4().hex}{extension}"
        path = self.folder / name
        path.write_bytes(data)
        download = re.sub(r"[^\w.\- ]", "_", Path(original).name)[:200] or f"translated{extension}"
        with self.lock:
            self.issued[name] = (path, download, time.monotonic() + self.expire_s)
        return name

    def fetch(self, name: str) -> tuple[bytes, str]:
        """(the file's bytes, its download name), or RequestError where `name` is not a live file of ours."""
        self.purge()
        with self.lock:
            found = self.issued.get(name)
        if found is None:  # LibreTranslate's words; 404 where the name is one of ours that is gone or never was
            raise RequestError("Invalid filename", 404 if re.fullmatch(issued_name_pattern(), name) else 400)
        return found[0].read_bytes(), found[1]

    def purge(self) -> None:
        now = time.monotonic()
        with self.lock:
            gone = [name for name, (_, _, expires) in self.issued.items() if expires <= now]
            for name in gone:
                path = self.issued.pop(name)[0]
                path.unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


async def translate_file(service, fields: dict, request) -> tuple[dict, int]:
    """`POST /translate_file`: (answer, status), or RequestError in LibreTranslate's words."""
    from ..translation.documents import DocumentError, format_of, read_document

    settings = service.settings
    if settings.disable_files_translation:
        raise RequestError(DISABLED, 403)
    service.admit(request, fields.get("api_key"), fields.get("secret"))
    for name in ("file", "source", "target"):
        if not fields.get(name):
            raise RequestError(f"Invalid request: missing {name} parameter")
    if not isinstance(fields["file"], tuple):
        raise RequestError("Invalid request: missing file parameter")
    filename, data, media_type = fields["file"]
    if not filename or not data:
        raise RequestError("Invalid request: empty file")
    try:
        extension = format_of(filename, media_type)
    except DocumentError:
        raise RequestError("Invalid request: file format not supported") from None
    if len(data) > settings.max_file_bytes:
        raise RequestError(f"Invalid request: the file has {len(data)} bytes, at most {settings.max_file_bytes}")
    source, target = str(fields["source"]), str(fields["target"])
    loop = asyncio.get_running_loop()
    try:
        if source == "auto":
            found = await loop.run_in_executor(
                None, lambda: read_document(filename, data, aligned=False, media_type=media_type)
            )
            source = service.detect(" ".join(found.texts)[:4096])[0]["language"]
        pair = service.pair_for(source, target)
        from ..translation.sentences import splitter

        aligned = pair.can("alignment")
        read = lambda: read_document(filename, data, aligned=aligned, split=splitter(source), media_type=media_type)
        document = await loop.run_in_executor(None, read)
    except DocumentError as error:
        raise RequestError(f"Invalid request: {error}") from None
    best = await translated(service, pair, document.texts, aligned, request)
    if best is None:
        return {"error": "the client went away"}, 499
    alignments = [hypotheses[0][2] for hypotheses in best] if aligned else None
    out = await loop.run_in_executor(None, document.translated, [h[0][1] for h in best], alignments)
    name = service.files.store(out, filename, extension)
    return {"translatedFileUrl": f"{request.base_url}download_file/{name}"}, 200


async def translated(service, pair, texts: list[str], aligned: bool, request):
    """The hypotheses of a document's sentences, CHUNK at a time through the pair's batcher (None: the client
    went away)."""
    options = {}
    if aligned:
        from ..formats.alignment import AlignmentSettings

        options["alignment"] = AlignmentSettings()
    best = []
    for start in range(0, len(texts), CHUNK):
        chunk = await service.translated(pair, texts[start : start + CHUNK], options, request, "Cannot translate file")
        if chunk is None:
            return None
        best += chunk
    return best


def download_file(service, name: str) -> tuple[bytes, str]:
    """`GET /download_file/NAME`: (the file's bytes, its download name), or RequestError."""
    if service.settings.disable_files_translation:
        raise RequestError(DISABLED)
    return service.files.fetch(name)


def issued_name_pattern() -> str:
    """What a name `Files.store` issues looks like: a UUID's hex and a document's extension."""
    from ..translation.documents import FORMATS

    return f"^[0-9a-f]{{32}}({'|'.join(re.escape(extension) for extension in FORMATS)})$"


def openapi_paths(limits: Limits) -> dict:
    """The two endpoints of document translation, within `limits` (the served languages), linked: the name in a
    translate_file answer's URL is the one download_file takes."""
    from ..translation.documents import FORMATS, MEDIA_TYPES

    accepted = " ".join(FORMATS)
    file = {
        "type": "string",
        "format": "binary",
        "description": f"the document; its name's extension says its format, one of {accepted}, else the part's "
        "media type, one of those in this body's encoding (others: 400); text is UTF-8",
    }
    body = {"type": "object", "required": ["file", "source", "target"],
            "properties": {"file": file,
                           "source": limits.source(),
                           "target": limits.target(),
                           "api_key": {"type": "string"}}}  # fmt: skip
    link = {"operationId": "download_file",
            "parameters": {"filename": "$response.body#/translatedFileUrl#regex:/download_file/([^/]+)$"}}  # fmt: skip
    name = {"type": "string", "pattern": issued_name_pattern()}
    form = {"schema": body, "encoding": {"file": {"contentType": ", ".join(dict.fromkeys(MEDIA_TYPES.values()))}}}
    return {
        "/translate_file": {"post": {
            "operationId": "translate_file",
            "summary": f"Translate a file ({accepted}), as LibreTranslate 1.9",
            "requestBody": {"required": True, "content": {"multipart/form-data": form}},
            "responses": {"200": {"description": '{"translatedFileUrl": "..."}', "links": {"download": link}},
                          "400": {"description": "a missing field, an unsupported format or language, a bad file"},
                          "403": {"description": "files translation disabled, or an unknown API key"}}}},
        "/download_file/{filename}": {"get": {
            "operationId": "download_file",
            "summary": "A translated file, until it expires",
            "parameters": [{"name": "filename", "in": "path", "required": True, "schema": name}],
            "responses": {"200": {"description": "the file, as an attachment"},
                          "400": {"description": "Invalid filename (not a name this server issues), or files disabled"},
                          "404": {"description": "Invalid filename (a name of the kind it issues: unknown or expired; "
                                                 "LibreTranslate answers 400)"}}}},
    }  # fmt: skip
