"""Language codes and their English names, as translation servers and packages show them (ISO 639-1). The standard
library only: `aayn serve` and the Argos export read it."""

from __future__ import annotations

LANGUAGE_NAMES = {
    "ar": "Arabic", "de": "German", "en": "English", "es": "Spanish", "fa": "Persian", "fr": "French",
    "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


def language_name(code: str) -> str:
    """The English name of `code`, else the code itself."""
    return LANGUAGE_NAMES.get(code, code)
