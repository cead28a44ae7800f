"""Language codes and their English names, as translation servers and packages show them (ISO 639-1). The standard
library only: `aayn serve` and the Argos export read it."""

from __future__ import annotations

import json
import re
from pathlib import Path

# a multi-target model's target-language token, put before the source text (OPUS-MT's `>>fr<<`, `>>zho_Hans<<`)
LANGUAGE_TOKEN = re.compile(r">>([a-z]{2,3}(?:_[A-Za-z]+)?)<<")

LANGUAGE_NAMES = {
    "ar": "Arabic", "de": "German", "en": "English", "es": "Spanish", "fa": "Persian", "fr": "French",
    "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


def language_name(code: str) -> str:
    """The English name of `code`, else the code itself."""
    return LANGUAGE_NAMES.get(code, code)


def language_tokens(pieces) -> dict[str, str]:
    """{language code: its token} of the target-language tokens among a vocabulary's `pieces`."""
    return {match[1]: piece for piece in pieces if (match := LANGUAGE_TOKEN.fullmatch(piece))}


def folder_language_tokens(folder: str | Path) -> dict[str, str]:
    """The target-language tokens of a model folder's (or export's) vocabulary: `vocab.json` (SentencePiece
    tokenizers: Marian's) or `tokenizer.json`'s; {} where it has neither or names no such token."""
    folder = Path(folder)
    readers = (("vocab.json", lambda data: data), ("tokenizer.json", lambda data: data["model"]["vocab"]))
    for name, vocabulary in readers:
        path = folder / name
        if path.is_file():
            try:
                pieces = vocabulary(json.loads(path.read_text(encoding="utf-8")))
            except (ValueError, KeyError, TypeError):
                continue  # not a vocabulary this reads (a BPE's merges only): the model names no target tokens
            pieces = [piece[0] if isinstance(piece, list) and piece else piece for piece in pieces]  # a Unigram's
            return language_tokens(piece for piece in pieces if isinstance(piece, str))
    return {}
