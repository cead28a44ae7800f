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


def language_token(lang: str) -> str:
    """The target-language token of `lang` (`>>fr<<`), put before a source text with a space."""
    return f">>{lang}<<"


def parse_lang_pairs(value: str) -> list[tuple[str, str]]:
    """`en-es,en-fr` as [("en", "es"), ("en", "fr")], or ValueError naming the item that is not a pair. An item
    may end in `:N`, that pair's first N training pairs only (`pair_limits`)."""
    return list(pair_limits(value))


def pair_limits(value: str) -> dict[tuple[str, str], int | None]:
    """{pair: at most that many training pairs, or None} of a `lang_pairs` value (`en-es,en-pt:2000`)."""
    items = [item.strip() for item in value.split(",")] if value else []
    pairs = {}
    for item in items:
        named, colon, limit = item.partition(":")
        source, dash, target = named.partition("-")
        if not (dash and source.isalpha() and target.isalpha()) or source.lower() == target.lower():
            raise ValueError(f"lang_pairs: {item!r} is not a pair of two language codes SRC-TGT (e.g. en-es,en-fr)")
        if colon and not (limit.isdigit() and int(limit) > 0):
            raise ValueError(f"lang_pairs: {item!r}: after the colon, the pair's training size (e.g. en-pt:2000)")
        pair = (source.lower(), target.lower())
        if pair in pairs:
            raise ValueError(f"lang_pairs names {pair_name(pair)} twice")
        pairs[pair] = int(limit) if colon else None
    if not pairs:
        raise ValueError("lang_pairs names no pair; give SRC-TGT pairs separated by commas (e.g. en-es,en-fr)")
    return pairs


def pair_name(pair: tuple[str, str]) -> str:
    return f"{pair[0]}-{pair[1]}"


def _config(folder: str | Path) -> dict:
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def folder_lang_pairs(folder: str | Path) -> list[tuple[str, str]]:
    """The pairs a multilingual aayn folder was trained on (its config's `lang_pairs`); [] for any other."""
    pairs = _config(folder).get("lang_pairs")
    return parse_lang_pairs(",".join(pairs)) if isinstance(pairs, list) and pairs else []


def folder_source_tokens(folder: str | Path) -> bool:
    """Whether a multilingual aayn folder's sources carry their language's token after the target's (its config's
    `source_lang_token`, fairseq's `--encoder-langtok src`)."""
    return _config(folder).get("source_lang_token") is True


def source_language_token(lang: str) -> str:
    """The source-language token of `lang` (fairseq's `__en__`), after the target's before a source text."""
    return f"__{lang}__"
