"""Cleaning a parallel corpus before training: rules on each pair (OpusCleaner's and Firefox's translations
pipeline's filters), duplicates, language identification of both sides, and model-based filters for misaligned
pairs that no rule sees (dual conditional cross-entropy, Junczys-Dowmunt 2018, and the source's gain: how much
better the models read each side beside its own partner than beside another pair's), streamed in chunks.

Each removed pair is named by the first rule that removes it, in `RULES`' order; the rules on one pair run in
worker processes (chunk by chunk, in order), the duplicate sets and the model filter in this one. Nothing is
lost: what is kept and what is removed (with its line number and rule) together are the input, and the same
input and settings give the same output. Memory is one chunk per worker plus two 8-byte hashes per distinct pair.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing import get_context

# the order a pair's rules are tried in; the first that fails it names its removal
RULES = ("empty", "unprintable", "identical", "length", "ratio", "long_word", "numbers", "urls", "script",
         "language", "duplicate", "near_duplicate", "cross_entropy", "source_gain")  # fmt: skip
CHUNK = 5_000  # pairs a worker takes at a time

# the scripts (the first word of a letter's Unicode name) each language is written in
_WRITTEN_IN = """
LATIN: en fr de es it pt ro pl tr sw id vi tl nl sv da no fi cs sk sl hr hu et lv lt ca eu gl ga mt is sq af ms
CYRILLIC: ru uk bg be mk sr kk ky tg mn
ARABIC: ar fa ur ps
GREEK: el
HEBREW: he
DEVANAGARI: hi mr ne
BENGALI: bn
TAMIL: ta
TELUGU: te
THAI: th
GEORGIAN: ka
ARMENIAN: hy
CJK: zh
CJK HIRAGANA KATAKANA: ja
HANGUL CJK: ko
"""
SCRIPTS = {
    lang: tuple(scripts.split())
    for scripts, langs in (line.split(":") for line in _WRITTEN_IN.strip().splitlines())
    for lang in langs.split()
}
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_URL = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)


@dataclass(frozen=True)
class CleaningRules:
    """The rules' settings (each named in `RULES`); `language` and `script` apply to the languages they know."""

    source_lang: str
    target_lang: str
    max_words: int = 150  # a side longer than this (whitespace words) is removed: `length`
    max_ratio: float = 3.0  # the longer side over the shorter, in characters: `ratio`
    ratio_from: int = 10  # characters of the longer side below which the ratio is not judged
    max_word_chars: int = 50  # a "word" longer than this (a run of URL-less non-space characters): `long_word`
    max_foreign_letters: float = 0.1  # share of a side's letters outside its language's scripts: `script`
    numbers: bool = True  # the numbers of the two sides must be the same: `numbers`
    urls: bool = True  # the URLs of the two sides must be the same: `urls`
    duplicates: bool = True  # `duplicate`: the pair as seen before; `near_duplicate`: but for case, punctuation
    # and spaces
    language: bool = False  # each side's language identified (`translation.detect`): `language`
    language_candidates: tuple[str, ...] = ("de", "en", "es", "fr", "it", "nl", "pt", "ru")  # and the pair's own
    max_dual_cross_entropy: float | None = None  # with a forward and a backward model: `cross_entropy`
    min_source_gain: float | None = None  # with them too: `source_gain` (nats per token)

    def __post_init__(self):
        for name in ("max_words", "max_word_chars", "ratio_from"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not self.max_ratio >= 1:
            raise ValueError(f"max_ratio must be at least 1 (the longer side over the shorter), got {self.max_ratio}")
        if not 0 <= self.max_foreign_letters <= 1:
            raise ValueError(f"max_foreign_letters must be a share in [0, 1], got {self.max_foreign_letters}")

    @property
    def candidates(self) -> list[str]:
        return sorted({*self.language_candidates, self.source_lang, self.target_lang})


@lru_cache(maxsize=65_536)
def _script(char: str) -> str:
    return unicodedata.name(char, "UNKNOWN").split(" ")[0]


def foreign_letters(text: str, lang: str) -> float:
    """The share of `text`'s letters not in `lang`'s scripts (0 for a language `SCRIPTS` does not know)."""
    scripts = SCRIPTS.get(lang)
    letters = [char for char in text if char.isalpha()]
    if scripts is None or not letters:
        return 0.0
    return sum(_script(char) not in scripts for char in letters) / len(letters)


def _unprintable(text: str) -> bool:
    return any(unicodedata.category(char) in ("Cc", "Cs", "Co", "Cn") and char != "\t" for char in text)


def pair_rule(source: str, target: str, rules: CleaningRules) -> str | None:
    """The first of the one-pair rules that `(source, target)` fails, or None."""
    if not source.strip() or not target.strip():
        return "empty"
    if _unprintable(source) or _unprintable(target):
        return "unprintable"
    if source.strip().casefold() == target.strip().casefold():
        return "identical"
    if max(len(source.split()), len(target.split())) > rules.max_words:
        return "length"
    longer, shorter = max(len(source), len(target)), min(len(source), len(target))
    if longer >= rules.ratio_from and longer > rules.max_ratio * shorter:
        return "ratio"
    if any(len(word) > rules.max_word_chars for word in _URL.sub(" ", f"{source} {target}").split()):
        return "long_word"
    if rules.numbers and sorted(_NUMBER.findall(source)) != sorted(_NUMBER.findall(target)):
        return "numbers"
    if rules.urls and sorted(_URL.findall(source)) != sorted(_URL.findall(target)):
        return "urls"
    for text, lang in ((source, rules.source_lang), (target, rules.target_lang)):
        if foreign_letters(text, lang) > rules.max_foreign_letters:
            return "script"
    return None


def _near_form(text: str) -> str:
    return "".join(char for char in unicodedata.normalize("NFKC", text).casefold() if char.isalnum())


def _hash(*parts: str) -> int:
    digest = hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


_worker: dict = {}


def _start_worker(rules: CleaningRules, detector: Callable[[], Callable] | None) -> None:
    _worker.update(rules=rules, detect=detector() if detector is not None else None)


def _judge(chunk: list[tuple[str, str]]) -> list[str | None]:
    """A chunk's one-pair rules, then (for those passing) the language of each side."""
    rules, detect = _worker["rules"], _worker["detect"]
    verdicts = [pair_rule(source, target, rules) for source, target in chunk]
    if detect is not None:
        for i, (source, target) in enumerate(chunk):
            if verdicts[i] is None and any(detect.language(text) not in (lang, None) for text, lang in
                                           ((source, rules.source_lang), (target, rules.target_lang))):  # fmt: skip
                verdicts[i] = "language"
    return verdicts


def _chunks(pairs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    chunk = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class Deduplicator:
    """`duplicate` for a pair seen before (both sides as they are), `near_duplicate` for one equal to an earlier
    pair but for case, punctuation and spaces; 8-byte hashes of each kept pair."""

    def __init__(self):
        self.exact, self.near = set(), set()

    def __call__(self, source: str, target: str) -> str | None:
        exact, near = _hash(source.strip(), target.strip()), _hash(_near_form(source), _near_form(target))
        if exact in self.exact:
            return "duplicate"
        if near in self.near:
            return "near_duplicate"
        self.exact.add(exact)
        self.near.add(near)
        return None


def clean_pairs(
    pairs: Iterable[tuple[str, str]],
    rules: CleaningRules,
    *,
    detector: Callable[[], Callable] | None = None,
    model_scores: Callable[[list[str], list[str]], list[tuple[float, float]]] | None = None,
    processes: int = 1,
    chunk_size: int | None = None,
) -> Iterator[tuple[int, str, str, str | None]]:
    """`(line, source, target, rule)` for each pair in input order, `rule` None for a kept pair.

    `detector` (with `rules.language`) makes, in each worker, a `translation.detect.Detector` (a side it cannot place,
    one without letters, is kept by that rule); `model_scores` gives, for the pairs of a chunk the rules before it
    kept, each pair's dual cross-entropy and source gain (`aayn.cli.clean.ModelScores`): a pair over
    `rules.max_dual_cross_entropy` is removed as `cross_entropy`, one under `rules.min_source_gain` as
    `source_gain`."""
    if rules.language and detector is None:
        raise ValueError("the language rule needs a language detector")
    model_rules = rules.max_dual_cross_entropy is not None or rules.min_source_gain is not None
    if model_rules != (model_scores is not None):
        raise ValueError("the cross_entropy and source_gain rules need their limit and a forward and backward model")
    detector = detector if rules.language else None
    dedup = Deduplicator() if rules.duplicates else None
    line = 0
    for chunk, verdicts in _judged(_chunks(pairs, chunk_size or CHUNK), rules, detector, processes):
        if dedup is not None:
            verdicts = [dedup(s, t) if v is None else v for (s, t), v in zip(chunk, verdicts)]
        if model_scores is not None:
            verdicts = _by_models(chunk, verdicts, model_scores, rules)
        for (source, target), verdict in zip(chunk, verdicts):
            line += 1
            yield line, source, target, verdict


def _judged(chunks, rules, detector, processes: int):
    """`(chunk, its one-pair verdicts)` in order, judged by `processes` workers, at most two chunks each ahead."""
    if processes < 2:
        _start_worker(rules, detector)
        try:
            yield from ((chunk, _judge(chunk)) for chunk in chunks)
        finally:
            _worker.clear()
        return
    pool = get_context("fork").Pool(processes, _start_worker, (rules, detector))
    try:
        waiting = deque()
        for chunk in chunks:
            waiting.append((chunk, pool.apply_async(_judge, (chunk,))))
            if len(waiting) >= 2 * processes:
                chunk, result = waiting.popleft()
                yield chunk, result.get()
        while waiting:
            chunk, result = waiting.popleft()
            yield chunk, result.get()
    finally:
        pool.terminate()


def _by_models(chunk, verdicts, scores, rules: CleaningRules) -> list[str | None]:
    kept = [i for i, verdict in enumerate(verdicts) if verdict is None]
    if not kept:
        return verdicts
    verdicts = list(verdicts)
    for i, (dual, gain) in zip(kept, scores([chunk[i][0] for i in kept], [chunk[i][1] for i in kept])):
        if rules.max_dual_cross_entropy is not None and dual > rules.max_dual_cross_entropy:
            verdicts[i] = "cross_entropy"
        elif rules.min_source_gain is not None and gain < rules.min_source_gain:
            verdicts[i] = "source_gain"
    return verdicts
