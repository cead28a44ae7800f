"""What every translator answers, whatever it runs on: the interface `aayn translate`, `aayn score`, `aayn evaluate`,
`aayn serve` and the benchmarks use. A leaf: it imports nothing of aayn.

Implementations: `aayn.translate.TorchTranslator` (saved aayn models, one or an ensemble, with the paper's search)
and `aayn.ct2.ExportedModel` (a CTranslate2 folder `aayn export` wrote, without torch); `aayn.opening.open_translator`
opens either from what `--model` names. `nbest(texts, nbest, batch_tokens=..., num_beams=..., length_penalty=...,
max_new_tokens=..., prefixes=..., progress=...)` gives, per input and in input order, the best hypotheses as
(score, text), batched by tokens and sorted by length (`aayn.data.token_batches`); `translate` the best texts.
"""

from __future__ import annotations

DECODING_BATCH_TOKENS = 4096  # padded source tokens a decoding (or scoring) batch holds by default

# what a caller may ask of a translator beyond translating: target prefixes, drawing attention, scoring pairs
ABILITIES = ("prefixes", "attention", "scores")


class Translator:
    """n-best translations of texts. Subclasses implement `nbest`; `abilities` says what else they do."""

    abilities: frozenset = frozenset()

    def nbest(self, texts: list[str], nbest: int = 1, **options) -> list[list[tuple[float, str]]]:
        raise NotImplementedError

    def translate(self, texts: list[str], **options) -> list[str]:
        """The best translation of each text, in input order (an empty or blank line: an empty line)."""
        return [hypotheses[0][1] for hypotheses in self.nbest(texts, 1, **options)]


def progress_bar(total: int, description: str | None):
    """A progress bar over `total` sentences on stderr, shown once the work has taken a second (None: no bar)."""
    if description is None:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit=" sentences", delay=1.0, leave=False)
