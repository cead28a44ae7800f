"""Suggestions, as LibreTranslate keeps them: `POST /suggest` (`q`, the text; `s`, the translation a person
suggests; `source`, `target`) answers 403 "Suggestions are disabled on this server." unless the server runs with
`--suggestions`, and then stores them in a SQLite file of LibreTranslate's schema (`--suggestions_db_path`, default
`db/suggestions.db`, LibreTranslate's; its own file serves as it is). Beyond LibreTranslate: `aayn serve suggestions
export --output DIR` writes them as a parallel corpus per language pair that `aayn train --model_name_or_path
FOLDER` fine-tunes on."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from .settings import RequestError, read_texts

DISABLED = "Suggestions are disabled on this server."
SCHEMA = """CREATE TABLE IF NOT EXISTS suggestions (
    "q" TEXT NOT NULL,
    "s" TEXT NOT NULL,
    "source" TEXT NOT NULL,
    "target" TEXT NOT NULL
)"""
LANGUAGE_CODE_CHARS = 32  # longer than any code LibreTranslate knows ("zh-Hant", "pt-BR")


class SuggestionDatabase:
    """LibreTranslate's `db/suggestions.db`: one row per suggestion, in the order they came."""

    def __init__(self, path: str | Path, create: bool = True):
        self.path = Path(path)
        if not self.path.is_file() and not create:
            raise FileNotFoundError(
                f"--suggestions_db_path {path}: no such file (the server writes it with --suggestions)"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        with self.lock, sqlite3.connect(self.path) as connection:
            connection.execute(SCHEMA)

    def add(self, q: str, s: str, source: str, target: str) -> None:
        with self.lock, sqlite3.connect(self.path) as connection:
            connection.execute(
                "INSERT INTO suggestions (q, s, source, target) VALUES (?, ?, ?, ?)", (q, s, source, target)
            )

    def all(self) -> list[tuple[str, str, str, str]]:
        with self.lock, sqlite3.connect(self.path) as connection:
            return [
                tuple(row) for row in connection.execute("SELECT q, s, source, target FROM suggestions ORDER BY rowid")
            ]


def read_suggestion(fields: dict, char_limit: int) -> tuple[str, str, str, str]:
    """(q, s, source, target) of a `POST /suggest`, checked in LibreTranslate's order with its messages, or
    RequestError; each text within the client's character limit and Unicode text, the codes short strings."""
    values = [fields.get(name) for name in ("q", "s", "source", "target")]
    for name, value in zip(("q", "s", "source", "target"), values):
        if not value:
            raise RequestError(f"Invalid request: missing {name} parameter")
        if not isinstance(value, str):
            raise RequestError(f"Invalid request: {name} must be a text, got {type(value).__name__}")
    q, s, source, target = values
    for name, text in (("q", q), ("s", s)):
        if len(text) > char_limit:
            raise RequestError(f"Invalid request: request ({len(text)}) exceeds text limit ({char_limit})")
        read_texts([text], name, batch=False)
    for name, code in (("source", source), ("target", target)):
        if len(code) > LANGUAGE_CODE_CHARS or not code.replace("-", "").replace("_", "").isalnum():
            raise RequestError(f"Invalid request: {name} must be a language code, got {code[:LANGUAGE_CODE_CHARS]!r}")
    return q, s, source, target


def suggest(service, fields: dict, request) -> tuple[dict, int]:
    """`POST /suggest`: 403 unless `--suggestions`; the suggestion stored, `{"success": true}`."""
    if service.suggestions is None:
        raise RequestError(DISABLED, 403)
    char_limit = service.admit(request, fields.get("api_key"), fields.get("secret"))
    service.suggestions.add(*read_suggestion(fields, char_limit))
    return {"success": True}, 200


def openapi_paths() -> dict:
    body = {"type": "object", "required": ["q", "s", "source", "target"],
            "properties": {"q": {"type": "string", "minLength": 1, "description": "the text"},
                           "s": {"type": "string", "minLength": 1, "description": "its suggested translation"},
                           "source": {"type": "string", "minLength": 1, "maxLength": LANGUAGE_CODE_CHARS},
                           "target": {"type": "string", "minLength": 1, "maxLength": LANGUAGE_CODE_CHARS},
                           "api_key": {"type": "string"}}}  # fmt: skip
    kinds = ("application/json", "application/x-www-form-urlencoded", "multipart/form-data")
    answers = {"200": {"description": '{"success": true}'}, "400": {"description": "a missing or bad field"},
               "403": {"description": f"{DISABLED} (without --suggestions), or an unknown API key"}}  # fmt: skip
    return {"/suggest": {"post": {
        "summary": "Suggest a translation of a text (stored with --suggestions), as LibreTranslate's",
        "requestBody": {"required": True, "content": {kind: {"schema": body} for kind in kinds}},
        "responses": answers}}}  # fmt: skip


def one_line(text: str) -> str:
    """A text as one corpus line: its line breaks (all that `str.splitlines` knows) made spaces."""
    return " ".join(text.splitlines()).strip()


def export(database: SuggestionDatabase, output: Path) -> dict[str, int]:
    """The suggestions as a line-aligned corpus per pair (`OUT/SRC-TGT/{train,validation,test}.{SRC,TGT}`, the
    layout `aayn train`'s `dataset_name` reads): the latest suggestion for each text wins, texts and suggestions
    on one line each. Validation and test hold the same pairs as train: a run's BLEU then says how well the folder
    has taken its users' corrections. Each pair's folder is new, written whole (beside its name, then renamed);
    returns the pairs written with their sizes."""
    from ..folders import check_new_folder, staged_folder

    latest: dict[tuple[str, str], dict[str, str]] = {}
    for q, s, source, target in database.all():
        q, s = one_line(q), one_line(s)
        if q and s:
            latest.setdefault((source, target), {})[q] = s
    if not latest:
        raise ValueError(f"{database.path}: no suggestions to export")
    for source, target in latest:  # nothing written where a folder is there already
        check_new_folder(output / f"{source}-{target}", "--output")
    written = {}
    for (source, target), pairs in sorted(latest.items()):
        with staged_folder(output / f"{source}-{target}") as folder:
            for split in ("train", "validation", "test"):
                (folder / f"{split}.{source}").write_text("".join(q + "\n" for q in pairs), encoding="utf-8")
                (folder / f"{split}.{target}").write_text("".join(s + "\n" for s in pairs.values()), encoding="utf-8")
        written[f"{source}-{target}"] = len(pairs)
    return written


def suggestions_command(verb: list[str], path: str, output: str | None) -> None:
    """`aayn serve suggestions [--suggestions_db_path FILE]` lists them; `... suggestions export --output DIR`
    writes the corpus."""
    usage = "aayn serve suggestions [export --output DIR] [--suggestions_db_path FILE]"
    if len(verb) > 2 or (len(verb) == 2 and verb[1] != "export"):
        raise ValueError(f"aayn serve takes no argument {' '.join(verb)!r}; for suggestions: {usage}")
    database = SuggestionDatabase(path, create=False)
    if len(verb) == 1:
        for q, s, source, target in database.all():
            print(f"{source}->{target}\t{one_line(q)}\t{one_line(s)}")
        return
    if not output:
        raise ValueError(f"aayn serve suggestions export needs --output DIR: {usage}")
    for pair, count in export(database, Path(output)).items():
        print(f"{Path(output) / pair}: {count} pairs")
