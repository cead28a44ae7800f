"""LibreTranslate's API (as LibreTranslate 1.9's `app.py` answers it) on `aayn serve`: what a request says, checked
in LibreTranslate's order with its messages, and its answers' shapes. Errors are `{"error": "..."}` with 400 (a
missing or bad field, too many texts or characters, a pair not served), 403 (a bad API key), 429 (the queue is
full) and 500 (the model failed). The room owns LibreTranslate's endpoints (`/translate` in its shape, `/detect`,
`/languages`, `/frontend/settings`) and its API keys; the service (`service.py`) translates."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from ..languages import language_name
from ..translation.markup import Fragment
from ..translation.sentences import Sentences, splitter
from .settings import (
    GLOSSARY_SCHEMA,
    Limits,
    QueueFull,
    RequestError,
    ServeSettings,
    read_alignment,
    read_glossary,
    read_texts,
)

FORMATS = ("text", "html")
FORM_KINDS = ("application/json", "application/x-www-form-urlencoded", "multipart/form-data")  # as it reads them
MAX_ALTERNATIVES = 8  # LibreTranslate's --alternatives-limit: n-best lists beyond it are refused


@dataclass
class LibreRequest:
    """One `POST /translate` in LibreTranslate's shape, checked."""

    q: list[str]  # the texts asked for, in order
    form: str  # "text" or "html"
    batch: bool  # `q` was a list
    source: str  # a code, or "auto"
    target: str
    alternatives: int
    api_key: str | None
    glossary: object = None  # aayn's own field: a `Glossary`
    alignment: object = None  # aayn's own field: `AlignmentSettings` where asked for (then answered)
    documents: list = field(default_factory=list)  # one `Sentences` or `Fragment` per text of `q` (`split`)

    def split(self, language: str, aligns: bool):
        """Each text as the sentences to translate, split by the rules of `language` (the source), with html's
        inline markup placed by alignments where the engine `aligns` (each sentence then translated whole).
        Returns the alignment to decode with: the one asked for, else for the markup (not answered), else None."""
        from ..formats.alignment import AlignmentSettings

        split = splitter(language)
        if self.form == "html":
            try:
                self.documents = [Fragment(text, aligned=aligns, split=split) for text in self.q]
            except ValueError as error:
                raise RequestError(f"Invalid request: q (format=html): {error}") from None
            return (self.alignment or AlignmentSettings()) if aligns else self.alignment
        self.documents = [Sentences(text, split) for text in self.q]
        return self.alignment

    @property
    def texts(self) -> list[str]:
        return [text for document in self.documents for text in document.texts]

    def answer(self, best: list[list[tuple[float, str]]], detected: dict | None) -> dict:
        """LibreTranslate's answer from each text's hypotheses (in `texts` order)."""
        translated, alternatives, start = [], [], 0
        for document in self.documents:
            hypotheses = best[start : start + len(document.texts)]
            start += len(document.texts)
            if isinstance(document, Fragment) and document.aligned:
                first = document.rebuilt([h[0][1] for h in hypotheses], [h[0][2] for h in hypotheses])
            else:
                first = document.rebuilt([h[0][1] for h in hypotheses])
            translated.append(first)
            others = []
            if self.alternatives and isinstance(document, Sentences):
                ranks = min((len(h) for h in hypotheses), default=1)
                for rank in range(1, ranks):  # alternative i: each sentence's i-th (LibreTranslate: none for html)
                    text = document.rebuilt([h[rank][1] for h in hypotheses])
                    if text != first and text not in others:
                        others.append(text)
            alternatives.append(others)
        result = {"translatedText": translated if self.batch else translated[0]}
        if self.alignment is not None:  # per text, the alignment of each piece translated (a sentence, a text run)
            aligned, start = [], 0
            for document in self.documents:
                aligned.append([h[0][2].as_dict() for h in best[start : start + len(document.texts)]])
                start += len(document.texts)
            result["alignment"] = aligned if self.batch else aligned[0]
        if detected is not None:
            result["detectedLanguage"] = [detected] * len(translated) if self.batch else detected
        if self.alternatives > 0:
            result["alternatives"] = alternatives if self.batch else alternatives[0]
        return result


def read_fields(body: bytes, content_type: str, query: str = "") -> dict:
    """The request's fields as LibreTranslate reads them: a JSON object, else its `request.values`, the query
    string's fields before the form's (urlencoded, or multipart: Nextcloud's client and LibreTranslate's own page
    post `FormData`), a form's `q` with its line ends made `\\n` (LibreTranslate's rule, for its character
    limits). A file part is kept as (filename, bytes, its media type or None)."""
    if "json" in content_type:
        try:
            fields = json.loads(body or b"null")
        except (ValueError, UnicodeDecodeError, RecursionError):
            fields = None
        if not isinstance(fields, dict):
            raise RequestError("Invalid JSON format")
        return fields
    form = multipart_fields(body, content_type) if "multipart/form-data" in content_type else urlencoded(body)
    fields = {**form, **urlencoded(query.encode())}  # a query string is ASCII, its escapes UTF-8
    if isinstance(fields.get("q"), str):
        fields["q"] = "\n".join(fields["q"].splitlines()) or fields["q"]  # a lone line end stays a text
    return fields


def urlencoded(data: bytes) -> dict:
    """The fields of an urlencoded form or query string, the first value of each."""
    try:
        return {name: values[0] for name, values in parse_qs(data.decode("utf-8"), keep_blank_values=True).items()}
    except UnicodeDecodeError:
        raise RequestError("Invalid request: the form is not UTF-8") from None


def multipart_fields(body: bytes, content_type: str) -> dict:
    """The fields of a multipart/form-data body (the standard library's MIME parser: no extra package): text
    fields as str, file parts as (filename, bytes, the part's media type or None); the first part of each name."""
    from email.parser import BytesParser
    from email.policy import HTTP

    if "boundary=" not in content_type:
        raise RequestError("Invalid request: a multipart form without its boundary")
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    if not message.is_multipart():
        raise RequestError("Invalid request: the multipart form cannot be read")
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name or name in fields:
            continue
        data = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        if filename is not None:
            fields[name] = (filename, data, part.get_content_type() if "content-type" in part else None)
            continue
        try:
            fields[name] = data.decode(part.get_content_charset() or "utf-8")
        except (UnicodeDecodeError, LookupError):
            raise RequestError(f"Invalid request: the form field {name} is not UTF-8") from None
    return fields


async def translate(service, fields: dict, request) -> tuple[dict, int]:
    """`POST /translate` in LibreTranslate's shape: (answer, status), or RequestError with its message."""
    char_limit = service.admit(request, fields.get("api_key"), fields.get("secret"))
    asked = read_translate(fields, service.settings, MAX_ALTERNATIVES, char_limit)
    detected, source = None, asked.source
    if source == "auto":
        detected = service.detect(" ".join(asked.q))[0]
        source = detected["language"]
    pair = service.pair_for(source, asked.target)
    options = {"num_return_sequences": asked.alternatives + 1} if asked.alternatives else {}
    if asked.glossary is not None:
        pair.require("glossary")
        options["glossary"] = asked.glossary
    if asked.alignment is not None:
        pair.require("alignment")
    alignment = asked.split(source, pair.can("alignment"))  # sentences; html's inline markup by alignments
    if alignment is not None:
        options["alignment"] = alignment
    texts = asked.texts
    try:
        best = await service.translated(pair, texts, options, request, "Cannot translate text") if texts else []
    except QueueFull as error:  # LibreTranslate's "slow down"
        raise RequestError(f"Slowdown: {error}", 429) from None
    if best is None:
        return {"error": "the client went away"}, 499
    return asked.answer(best, detected), 200


def detect(service, fields: dict, request) -> tuple[list[dict], int]:
    """`POST /detect`: the language of `q` among the served sources."""
    service.admit(request, fields.get("api_key"), fields.get("secret"))
    if not fields.get("q") or not isinstance(fields["q"], str):
        raise RequestError("Invalid request: missing q parameter")
    return service.detect(fields["q"]), 200


def languages(service) -> list[dict]:
    """`GET /languages`: every served language, each with the targets it translates into (none for a language
    served only as a target), as LibreTranslate lists its installed languages: Discourse checks that both the
    source and the target are listed codes."""
    codes = sorted({code for pair in service.named for code in (pair.source, pair.target)})
    return [
        {"code": code, "name": language_name(code),
         "targets": sorted(pair.target for pair in service.named if pair.source == code)}
        for code in codes
    ]  # fmt: skip


def frontend_settings(service) -> dict:
    """`GET /frontend/settings`: what LibreTranslate's page reads (limits, keys, the first pair's languages)."""
    first = service.named[0] if service.named else None
    language = (
        {side: {"code": code, "name": language_name(code)}
         for side, code in (("source", first.source), ("target", first.target))}
        if first else {}
    )  # fmt: skip
    from ..translation.documents import FORMATS as FILE_FORMATS

    keys, required = service.access.keys is not None, service.access.key_required
    files = not service.settings.disable_files_translation
    return {
        "charLimit": service.settings.max_chars, "frontendTimeout": 500, "apiKeys": keys, "keyRequired": required,
        "suggestions": service.settings.suggestions, "filesTranslation": files,
        "supportedFilesFormat": list(FILE_FORMATS) if files else [],
        "language": language,
    }  # fmt: skip


def read_translate(fields: dict, settings: ServeSettings, max_alternatives: int, char_limit: int = 0) -> LibreRequest:
    """A `POST /translate` in LibreTranslate's shape, checked in its order, or RequestError with its message;
    `char_limit`: characters per text (0: the server's `--char_limit`)."""
    char_limit = char_limit or settings.max_chars
    q, source, target = fields.get("q"), fields.get("source"), fields.get("target")
    if "q" not in fields:  # neither shape's texts: name both
        raise RequestError('Invalid request: missing q parameter (or "inputs": a text or a list, the Hub\'s shape)')
    for name, value in (("q", q), ("source", source), ("target", target)):
        if not value:
            raise RequestError(f"Invalid request: missing {name} parameter")
    alternatives = fields.get("alternatives")  # a JSON integer, or a form's digits (below 0, null or "": none)
    alternatives = 0 if alternatives is None or alternatives == "" else alternatives
    if isinstance(alternatives, str) and re.fullmatch(r"-?[0-9]+", alternatives):
        alternatives = int(alternatives)
    if isinstance(alternatives, float) and alternatives.is_integer():  # JSON's 2.0 is an integer to JSON Schema
        alternatives = int(alternatives)
    if isinstance(alternatives, bool) or not isinstance(alternatives, int):
        raise RequestError("Invalid request: alternatives parameter is not a number")
    alternatives = max(0, alternatives)
    if alternatives > max_alternatives:
        raise RequestError(f"Invalid request: alternatives parameter must be <= {max_alternatives}")
    batch = isinstance(q, list)
    texts = q if batch else [q]
    if not all(isinstance(text, str) for text in texts) or not isinstance(source, str) or not isinstance(target, str):
        raise RequestError("Invalid request: q must be a text or a list of texts, source and target language codes")
    if len(texts) > settings.max_sentences:
        raise RequestError(f"Invalid request: request ({len(texts)}) exceeds text limit ({settings.max_sentences})")
    for text in texts:
        if len(text) > char_limit:
            raise RequestError(f"Invalid request: request ({len(text)}) exceeds text limit ({char_limit})")
    read_texts(texts, "q", batch)
    form = fields.get("format")
    form = "text" if form is None or form == "" else form
    if form not in FORMATS:
        raise RequestError(f"{form} format is not supported")
    glossary = read_glossary(fields.get("glossary"))
    flag = fields.get("alignment")
    flag = {"true": True, "false": False, "": False}.get(flag, flag) if isinstance(flag, str) else flag
    alignment = read_alignment(flag) if flag is not None else None
    return LibreRequest(texts, form, batch, source, target, alternatives, fields.get("api_key"), glossary, alignment)


def openapi_shape(limits: Limits) -> tuple[dict, dict, dict]:
    """(the JSON body's schema, a form's, the 200 answer's schema) of LibreTranslate's shape of `POST /translate` (a
    JSON object, or the same fields in the query string and an urlencoded or multipart form, where every value is
    text and `q` one text), within `limits`."""
    texts = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    alternatives = {"description": f"n-best texts beside the best, at most {MAX_ALTERNATIVES} (below 0: none)",
                    "oneOf": [{"type": "integer", "maximum": MAX_ALTERNATIVES}, {"type": "null"},
                              {"type": "string", "pattern": f"^(-[0-9]+|0*[0-{MAX_ALTERNATIVES}])?$"}]}  # fmt: skip
    body = {
        "title": "LibreTranslate's shape",
        "type": "object",
        "required": ["q", "source", "target"],
        "properties": {
            "q": limits.texts(least=1),
            "source": limits.source(),
            "target": limits.target(),
            "format": {"enum": [*FORMATS, "", None]},
            "alternatives": alternatives,
            "api_key": {"type": ["string", "null"]},
            "glossary": GLOSSARY_SCHEMA,
            "alignment": {
                "description": "aayn's own: each translation's word alignment",
                "oneOf": [{"type": ["boolean", "null"]}, {"enum": ["true", "false", ""]}],  # "": a form's text
            },
        },
    }
    detected = {"type": "object", "properties": {"language": {"type": "string"}, "confidence": {"type": "number"}}}
    answer = {
        "type": "object",
        "properties": {
            "translatedText": texts,
            "alternatives": {"type": "array"},
            "detectedLanguage": {"oneOf": [detected, {"type": "array", "items": detected}]},  # one per text of a list
            "alignment": {"type": "array"},
        },
    }  # fmt: skip
    form = {**body, "properties": {
        **body["properties"], "q": {**limits.text(), "minLength": 1}, "alternatives": alternatives["oneOf"][2],
        "glossary": {**GLOSSARY_SCHEMA["oneOf"][2], "description": GLOSSARY_SCHEMA["description"]},
        "alignment": {"enum": ["true", "false", ""]}, "api_key": {"type": "string"},
        "format": {"enum": [*FORMATS, ""]}}}  # fmt: skip
    return body, form, answer


def openapi_paths() -> dict:
    """The endpoints LibreTranslate's clients call beside `POST /translate`."""
    error = {"description": 'a bad request: {"error": "..."}'}
    detect_body = {"type": "object", "required": ["q"],
                   "properties": {"q": {"type": "string", "minLength": 1},
                                  "api_key": {"type": ["string", "null"]}}}  # fmt: skip
    return {
        "/languages": {"get": {"summary": "The served source languages, each with its targets",
                               "responses": {"200": {"description": "[{code, name, targets}]"}}}},
        "/detect": {"post": {"summary": "The language of q among the served sources (LibreTranslate's)",
                             "requestBody": {"required": True, "content": {kind: {"schema": detect_body}
                                                                           for kind in FORM_KINDS}},
                             "responses": {"200": {"description": "[{language, confidence}]"}, "400": error,
                                           "403": {"description": "an unknown API key"}}}},
        "/frontend/settings": {"get": {"summary": "What LibreTranslate's own page reads (limits, languages)",
                                       "responses": {"200": {"description": "charLimit, language, apiKeys, ..."}}}},
    }  # fmt: skip
