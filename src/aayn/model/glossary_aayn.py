"""Glossaries: source terms and the target terms they must translate to, as `generate`'s constraints.

A glossary is a list of (source term, target term) entries, read from a TSV file (`aayn translate --glossary`), a
JSON object or list of pairs (`aayn serve`'s `glossary` field), or given to the pipeline as a dict. A source term
applies to a sentence whose words contain its words in a row, case as written ("New York" applies to "in New
York.", not to "new york" nor to "New Yorker"); where applied terms overlap, the longer one wins (then the one
listed first). Each applied term's target term must appear in the translation (at least once), by lexically
constrained search (constraints_aayn.py). A target term is tokenized as it reads inside a sentence, after a
space.

This file travels with every saved checkpoint (the pipeline imports it): it imports only the standard library.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

WORD = re.compile(r"\w+|[^\w\s]")  # words and single punctuation marks, as the terms are matched


@dataclass(frozen=True)
class Glossary:
    """(source term, target term) entries, in the order given (each source term once)."""

    entries: tuple[tuple[str, str], ...]

    def __post_init__(self):
        seen = {}
        for number, entry in enumerate(self.entries, 1):
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2 and all(isinstance(t, str) for t in entry)):
                raise ValueError(f"glossary entry {number}: a pair (source term, target term) of texts, got {entry!r}")
            source, target = entry
            if not WORD.findall(source) or not target.strip():
                raise ValueError(f"glossary entry {number}: an empty source or target term ({source!r}, {target!r})")
            if source in seen and seen[source] != target:
                raise ValueError(
                    f"glossary entry {number}: {source!r} is given twice, as {seen[source]!r} and as {target!r}"
                )
            seen[source] = target

    @classmethod
    def read(cls, path: str | os.PathLike) -> Glossary:
        """A TSV file: one `source term<TAB>target term` per line; blank lines and lines starting with # skipped."""
        entries = []
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                line = line.rstrip("\r\n")
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                fields = line.split("\t")
                if len(fields) != 2 or not all(field.strip() for field in fields):
                    raise ValueError(
                        f"{path}, line {number}: a glossary line is `source term<TAB>target term`, got {line!r}"
                    )
                entries.append((fields[0].strip(), fields[1].strip()))
        try:
            return cls(tuple(entries))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    @classmethod
    def parse(cls, value, files: bool = True) -> Glossary:
        """A glossary from a dict {source: target}, a list of [source, target] pairs, a Glossary, JSON text of
        either, TSV text (lines `source<TAB>target`), or (with `files`) the path of a TSV file."""
        if isinstance(value, Glossary):
            return value
        if files and (isinstance(value, os.PathLike) or (isinstance(value, str) and os.path.isfile(value))):
            return cls.read(value)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                if "\t" not in value:
                    raise ValueError(
                        "a glossary is an object {source: target}, a list of [source, target] pairs, or TSV lines"
                    ) from None
                lines = [line for line in value.splitlines() if line.strip() and not line.lstrip().startswith("#")]
                value = [tuple(field.strip() for field in line.split("\t")) for line in lines]
        if isinstance(value, dict):
            value = list(value.items())
        if not isinstance(value, (list, tuple)):
            raise ValueError(  # noqa: TRY004  a request's fault, said as the others
                f"a glossary is an object {{source: target}} or a list of [source, target] pairs, got {value!r}"
            )
        return cls(tuple(tuple(entry) if isinstance(entry, list) else entry for entry in value))

    def terms_for(self, text: str) -> list[str]:
        """The target terms a translation of `text` must contain: those of the source terms found in it."""
        words = WORD.findall(text)
        taken = [False] * len(words)
        found = []
        by_length = sorted(enumerate(self.entries), key=lambda item: (-len(WORD.findall(item[1][0])), item[0]))
        for index, (source, _) in by_length:
            term = WORD.findall(source)
            for start in range(len(words) - len(term) + 1):
                span = range(start, start + len(term))
                if words[start : start + len(term)] == term and not any(taken[i] for i in span):
                    for i in span:
                        taken[i] = True
                    found.append(index)
        return list(dict.fromkeys(self.entries[index][1] for index in sorted(found)))


def term_ids(tokenizer, term: str) -> list[int]:
    """The target token ids of `term` as it reads inside a sentence, after a space (a byte-level BPE marks the
    space in the word's first token; SentencePiece marks every word so): the tokens that "a " + term adds to "a",
    or the term's own where the two do not split so."""
    anchor = tokenizer(text_target="a", add_special_tokens=False)["input_ids"]
    both = tokenizer(text_target="a " + term, add_special_tokens=False)["input_ids"]
    if both[: len(anchor)] == anchor and len(both) > len(anchor):
        return both[len(anchor) :]
    return tokenizer(text_target=term, add_special_tokens=False)["input_ids"]
