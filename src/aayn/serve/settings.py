"""The terms every room of `aayn serve` shares, whatever the request's shape: the server's limits
(`ServeSettings`), a request's fault in one line with its HTTP status (`RequestError`), and the options both shapes
read the same way (a glossary given in the request, alignments asked for)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..formats.translator import DECODING_BATCH_TOKENS, unreadable

GLOSSARY = "an object {source term: target term} or a list of [source term, target term] pairs"
# a character that is not a space in JSON Schema's regular expressions (ECMA-262's \s) nor in Python's (`str.strip`
# also takes the separators \x1c-\x1f and \x85 away): a term holds one, a word or a mark
NOT_A_SPACE = r"[^\s\x1c-\x1f\x85]"
TERM = {"type": "string", "pattern": NOT_A_SPACE}
NOT_A_LINE_END = "[^\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]"  # what `str.splitlines` does not split at
TSV_LINE = f"{NOT_A_LINE_END}*{NOT_A_SPACE}{NOT_A_LINE_END}*\t{NOT_A_LINE_END}*{NOT_A_SPACE}{NOT_A_LINE_END}*"
GLOSSARY_SCHEMA = {
    "description": f"aayn's own: {GLOSSARY}, or TSV lines `source<TAB>target` (each source term once)",
    "oneOf": [
        {"type": "object", "propertyNames": TERM, "additionalProperties": TERM},
        {
            "type": "array",
            "items": {
                "type": "array",
                "prefixItems": [TERM, TERM],
                "items": TERM,
                "minItems": 2,
                "maxItems": 2,
                "description": "an entry: [source term, target term]",
            },
        },
        {"type": "string", "pattern": f"^({TSV_LINE}(\n{TSV_LINE})*\n?)?$"},
        {"type": "null"},
    ],
}


class RequestError(ValueError):
    """What is wrong with a request, in one line, and the HTTP status that says so."""

    def __init__(self, message: str, status: int = 400, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


class QueueFull(RequestError):
    """The queue holds `--max_queue` sentences already (503; LibreTranslate's shape says 429, "Slowdown")."""

    def __init__(self, message: str):
        super().__init__(message, 503, {"Retry-After": "1"})


@dataclass
class ServeSettings:
    batch_tokens: int = DECODING_BATCH_TOKENS
    max_wait_ms: float = 10.0
    max_queue: int = 1024  # sentences waiting or being decoded
    max_sentences: int = 64  # per request
    max_chars: int = 2000  # per text
    disable_files_translation: bool = False  # POST /translate_file, GET /download_file
    max_file_bytes: int = 20 * 1024 * 1024  # a file to translate
    files_expire_s: float = 1800.0  # a translated file's life (LibreTranslate's 30 minutes)
    metrics: bool = False  # GET /metrics
    metrics_auth_token: str | None = None  # /metrics only for `Authorization: Bearer TOKEN`
    suggestions: bool = False  # POST /suggest stores what it is sent (LibreTranslate's --suggestions)
    suggestions_db_path: str = "db/suggestions.db"


@dataclass(frozen=True)
class Limits:
    """What a request may hold on this server, as /spec states it: characters per text, texts per request, the
    served source and target codes (empty: any code, as a document made without a server says)."""

    chars: int = ServeSettings.max_chars
    sentences: int = ServeSettings.max_sentences
    sources: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()

    def text(self) -> dict:
        return {"type": "string", "maxLength": self.chars}

    def texts(self, least: int = 0) -> dict:
        """A text, or a list of texts (`least`: the fewest characters of a lone text, and the fewest texts)."""
        one = {**self.text(), "minLength": least} if least else self.text()
        many = {"type": "array", "items": self.text(), "maxItems": self.sentences, "minItems": least}
        return {"oneOf": [one, many]}

    def source(self) -> dict:
        return language((*self.sources, "auto") if self.sources else (), "a served source language code, or auto")

    def target(self) -> dict:
        return language(self.targets, "a served target language code")


def language(codes: tuple[str, ...], description: str) -> dict:
    """One of `codes` (none: any code)."""
    return {"enum": list(codes), "description": description} if codes else {
        "type": "string", "minLength": 1, "description": description}  # fmt: skip


def read_alignment(value):
    """A request's `alignment` (true or false) as the translator's `AlignmentSettings` (None: not asked)."""
    from ..formats.alignment import AlignmentSettings

    if not isinstance(value, bool):
        raise RequestError(f"Invalid request: alignment must be true or false, got {json.dumps(value)}")
    return AlignmentSettings() if value else None


def read_glossary(value):
    """A request's `glossary` (JSON or TSV text; never a path on the server; null or "": none), or RequestError
    naming the fault."""
    from ..model.glossary_aayn import Glossary

    if value is None or value == "":
        return None
    if not isinstance(value, (str, dict, list)):
        raise RequestError(f"glossary must be {GLOSSARY}")
    try:
        return Glossary.parse(value, files=False)
    except ValueError as error:
        raise RequestError(f"Invalid request: glossary: {error}") from None


def read_texts(texts: list[str], name: str, batch: bool = True) -> None:
    """RequestError (400) naming the first text that no engine can take (`unreadable`), before it joins a batch:
    `name` is the field (`q`, `inputs`), indexed where the request gave a list. LibreTranslate answers such a text
    500 from its model; aayn says what is wrong with it, and translates NUL and control characters as text."""
    for index, text in enumerate(texts):
        reason = unreadable(text)
        if reason is not None:
            raise RequestError(
                f"Invalid request: {name}[{index}] {reason}" if batch else f"Invalid request: {name} {reason}"
            )
