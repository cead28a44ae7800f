"""The target of a multi-target model (OPUS-MT's, or one `aayn train` made with `lang_pairs`): `--target_lang xx`
puts its `>>xx<<` token before each text (`Translator.target_token`; with the source's `__xx__` after it where the
folder was trained so), in every door that opens a translator; a
direction the folder was not trained on (its `lang_pairs`) is said to be zero-shot in one line, and `--pivot LANG`
translates through LANG instead, by two of the folder's trained directions."""

from __future__ import annotations

import sys
from pathlib import Path

from ..formats.translator import Translator
from ..languages import (
    folder_lang_pairs,
    folder_language_tokens,
    folder_source_tokens,
    pair_name,
    source_language_token,
)


def target_token(names: list[str], target_lang: str | None) -> str:
    """The token `--target_lang` asks of the folder (its vocabulary's `>>xx<<`); "" without --target_lang."""
    if not target_lang:
        return ""
    tokens = folder_language_tokens(names[0]) if Path(names[0]).is_dir() else {}
    if not tokens:
        raise ValueError(f"--target_lang {target_lang}: {names[0]} translates into one language (its vocabulary holds "
                         "no >>xx<< token)")  # fmt: skip
    if target_lang not in tokens:
        raise ValueError(f"--target_lang {target_lang}: {names[0]} has no token for {target_lang} (its targets: "
                         f"{', '.join(sorted(tokens))})")  # fmt: skip
    return tokens[target_lang]


def language_prefix(names: list[str], source_lang: str | None, target_lang: str | None) -> str:
    """What a door puts before each text: the target's token (`target_token`), and after it the source's
    (`__en__`) where the folder's sources carry theirs (`source_lang_token`, fairseq's `--encoder-langtok src`)."""
    token = target_token(names, target_lang)
    if not token or not (Path(names[0]).is_dir() and folder_source_tokens(names[0])):
        return token
    sources = sorted({source for source, _ in folder_lang_pairs(names[0])})
    if source_lang not in sources:
        given = f"--source_lang {source_lang}: it has no token for it" if source_lang else "give --source_lang"
        raise ValueError(f"{names[0]} puts the source language's token before each text ({given}; its sources: "
                         f"{', '.join(sources)})")  # fmt: skip
    return f"{token} {source_language_token(source_lang)}"


def check_direction(names: list[str], source_lang: str | None, target_lang: str | None, pivot: str | None,
                    say=print) -> None:  # fmt: skip
    """One line where source -> target is not one of the folder's trained pairs (zero-shot); with `pivot`, the
    error where either leg is not trained."""
    pairs = folder_lang_pairs(names[0]) if Path(names[0]).is_dir() else []
    if pivot:
        if not (pairs and source_lang and target_lang):
            raise ValueError("--pivot translates through a folder's trained pairs: give --source_lang and "
                             "--target_lang of a folder trained with lang_pairs")  # fmt: skip
        for leg in ((source_lang, pivot), (pivot, target_lang)):
            if leg not in pairs:
                raise ValueError(f"--pivot {pivot}: {names[0]} was not trained on {pair_name(leg)} (its pairs: "
                                 f"{', '.join(map(pair_name, pairs))})")  # fmt: skip
        return
    if pairs and source_lang and target_lang and (source_lang, target_lang) not in pairs:
        trained = ", ".join(map(pair_name, pairs))
        say(
            f"{pair_name((source_lang, target_lang))} is zero-shot: {names[0]} was trained on {trained}; its output "
            "is often not in the asked language (--pivot LANG translates through a trained language)",
            file=sys.stderr,
        )


class Pivoted(Translator):
    """`inner` (a multi-target translator) into `pivot_token`'s language, then from that into `target_token`'s:
    its n best of the pivot's best. What depends on the source text itself (prefixes, a glossary, alignments)
    is not carried across the pivot."""

    def __init__(self, inner: Translator, pivot_token: str, target_token: str):
        self.inner, self.pivot_token, self.target_token_ = inner, pivot_token, target_token
        self.name, self.kind, self.generation = inner.name, inner.kind, inner.generation
        self.abilities = inner.abilities - {"prefixes", "glossary", "alignment", "attention"}
        self.source_limit = inner.source_limit

    def settings(self, nbest: int = 1, **given):
        return self.inner.settings(nbest, **given)

    def nbest(self, texts: list[str], nbest: int = 1, **options):
        for name in ("prefixes", "glossary", "alignment"):
            if options.get(name) is not None:
                raise ValueError(f"--pivot translates twice; {name} cannot cross the pivot")
        progress = options.pop("progress", None)
        self.inner.target_token = self.pivot_token
        middle = [hypotheses[0][1] for hypotheses in self.inner.nbest(texts, 1, progress=progress, **options)]
        self.inner.target_token = self.target_token_
        return self.inner.nbest(middle, nbest, **options)


def aimed(translator: Translator, names: list[str], source_lang, target_lang, pivot=None) -> Translator:
    """`translator` set to the target `--target_lang` asks (through `pivot` where given), the zero-shot said."""
    check_direction(names, source_lang, target_lang, pivot)
    if pivot:
        legs = language_prefix(names, source_lang, pivot), language_prefix(names, pivot, target_lang)
        return Pivoted(translator, *legs)
    translator.target_token = language_prefix(names, source_lang, target_lang)
    return translator


def off_target_rate(hypotheses: list[str], target_lang: str, languages: list[str]) -> float | None:
    """The share of the `hypotheses` not in `target_lang` among those `aayn serve`'s detector (Lingua), told
    `languages` (the folder's and the target), can place (not a blank one, nor one without letters); None where
    there is nothing to tell apart (one language), nothing it can place, or no detector installed."""
    from .detect import Detector

    codes = sorted({*languages, target_lang})
    if len(codes) < 2:
        return None
    try:
        detector = Detector(codes)
    except ImportError:
        return None
    found = [found for text in hypotheses if text.strip() and (found := detector.language(text)) is not None]
    return sum(language != target_lang for language in found) / len(found) if found else None
