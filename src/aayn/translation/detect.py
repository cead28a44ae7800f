"""Which of several languages a text is in, with Lingua (an offline detector, `pip install 'aayn[detect]'`)
restricted to those languages: `aayn serve`'s `source=auto` and `POST /detect`, and the off-target rate of `aayn
evaluate`. One language needs no detector: every text is taken to be in it."""

from __future__ import annotations

from .. import MissingExtra


class Detector:
    """Confidences (0-100, best first) that a text is in each of `codes` (ISO 639-1)."""

    def __init__(self, codes: list[str]):
        self.codes = sorted(set(codes))
        self.lingua = None
        if len(self.codes) > 1:
            try:
                from lingua import IsoCode639_1, Language, LanguageDetectorBuilder
            except ImportError as error:
                raise MissingExtra(
                    f"the served sources {', '.join(self.codes)} need a language detector for source=auto: "
                    "pip install 'aayn[detect]'"
                ) from error
            try:
                languages = [Language.from_iso_code_639_1(IsoCode639_1.from_str(code)) for code in self.codes]
            except ValueError as error:
                raise ValueError(f"a served source language is not an ISO 639-1 code Lingua knows ({error})") from None
            self.lingua = LanguageDetectorBuilder.from_languages(*languages).build()

    def __call__(self, text: str) -> list[dict]:
        """`[{"confidence": 0-100, "language": code}, ...]`, best first, as LibreTranslate answers."""
        if self.lingua is None:
            return [{"confidence": 100.0, "language": self.codes[0]}]
        values = self.lingua.compute_language_confidence_values(text)
        return [
            {"confidence": round(100 * value.value, 2), "language": value.language.iso_code_639_1.name.lower()}
            for value in values
        ]

    def language(self, text: str) -> str | None:
        """The code of the language `text` is most likely in; None where Lingua cannot tell (a text without letters:
        every confidence 0, the order of its answer arbitrary)."""
        best = self(text)[0]
        return best["language"] if best["confidence"] > 0 else None
