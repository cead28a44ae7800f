"""The API-neutral core of `aayn serve`: the served language pairs, each with its batcher, and what every request
shape asks of them (a pair by its languages, a check that its engine has an ability, texts translated through the
batcher with the client's going away noticed, the server's health, language detection). The rooms of the two
request shapes (`hub_api.py`, `libretranslate.py`) read their requests, call this and write their answers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..formats.translator import TextError, Translator, lacking, with_token, without_token
from ..languages import language_name
from ..translation.detect import Detector
from .batcher import Batcher, Job, WorkerDied, WorkerTranslator, describe, one_line
from .keys import Access, client_address
from .settings import Limits, RequestError, ServeSettings


@dataclass
class Pair:
    """One served direction: its languages (None where the model's card names none: then it answers the Hub's
    shape only), the model folders, and the translators that decode for it (one, or worker processes).
    `target_token`: a multi-target model's token for this target (OPUS-MT's `>>fr<<`), put before each text; the
    pairs of one multi-target model share its translators and one batcher, so their sentences batch together."""

    source: str | None
    target: str | None
    names: list[str]
    translators: list[Translator]
    batcher: Batcher | None = field(default=None, repr=False)
    target_token: str = ""

    @property
    def label(self) -> str:
        return f"{self.source}:{self.target}" if self.source else ",".join(self.names)

    def can(self, ability: str) -> bool:
        return ability in self.translators[0].abilities

    def require(self, ability: str) -> None:
        """RequestError (400) where the pair's engine lacks `ability`."""
        if not self.can(ability):
            raise RequestError(f"Invalid request: {lacking(self.names[0], ability)}")


async def disconnected(request) -> None:
    """Returns once the client has gone (no polling: the server's next message after the body is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class Service:
    """The served `pairs` and what every room asks of them; `access`: keys and request limits (`keys.Access`),
    which each room applies to its requests."""

    def __init__(self, pairs: list[Pair], settings: ServeSettings, access: Access | None = None):
        self.pairs, self.settings, self.access = pairs, settings, access or Access()
        self.metrics = None  # `metrics.Metrics` where the server has --metrics
        self.files = None  # `files.Files`, the translated files, while the server runs
        self.suggestions = None  # `suggestions.SuggestionDatabase` where the server has --suggestions
        if settings.suggestions:
            from .suggestions import SuggestionDatabase

            self.suggestions = SuggestionDatabase(settings.suggestions_db_path)
        batchers = {}  # one per model (the pairs of a multi-target model share it)
        for pair in pairs:
            key = id(pair.translators)
            pair.batcher = batchers[key] = batchers.get(key) or Batcher(pair.translators, settings)
        self.batchers = list(batchers.values())
        self.named = [pair for pair in pairs if pair.source]
        self.sources = sorted({pair.source for pair in self.named})
        self.detector = Detector(self.sources) if self.sources else None
        first = pairs[0].translators[0]
        self.model = getattr(first, "description", None) or describe(first, pairs[0].names)

    async def translated(self, pair: Pair, texts: list[str], options: dict, request, failed: str):
        """The hypotheses of `texts` from the pair's batcher, or None when the client went away first (its
        sentences are dropped); a full queue raises QueueFull (503), a text no engine takes RequestError (400), a
        worker process that died twice with it 503, any other model error 500, each saying `failed` and its line."""
        loop = asyncio.get_running_loop()
        job = Job(with_token(pair.target_token, texts), options, loop, loop.create_future())
        pair.batcher.submit(job)
        # the answer, or the client gone: once the body is read, the next message the server gets is a disconnect
        gone = asyncio.ensure_future(disconnected(request))
        await asyncio.wait({job.answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not job.answer.done():
            job.abandoned = True
            return None
        gone.cancel()
        error = job.answer.exception()
        if isinstance(error, TextError):  # a text of this request no engine takes (the others' went on)
            raise RequestError(f"Invalid request: {one_line(error)}")
        if isinstance(error, WorkerDied):
            raise RequestError(f"{failed}: {one_line(error)} (twice); retry", 503, {"Retry-After": "1"})
        if error is not None:
            raise RequestError(f"{failed}: {one_line(error)}", 500)
        if self.metrics is not None:
            self.metrics.translated(pair, texts)
        return without_token(pair.target_token, job.answer.result())

    def admit(self, request, key, secret=None) -> int:
        """Lets one request through (`Access.admit`: its client's limit, its key) or RequestError; returns its
        character limit per text (its key's, else the server's)."""
        if key is not None and not isinstance(key, str):  # a JSON body's api_key of another type
            raise RequestError("Invalid request: api_key must be a text")
        origin = request.headers.get("origin", "")
        char_limit = self.access.admit(key, client_address(request.headers, request.client), origin, secret)
        return char_limit or self.settings.max_chars

    def limits(self) -> Limits:
        """What a request may hold here, for /spec (a key's own character limit aside)."""
        sources = tuple(self.sources)
        targets = tuple(sorted({pair.target for pair in self.named}))
        return Limits(self.settings.max_chars, self.settings.max_sentences, sources, targets)

    def health(self) -> dict:
        """`GET /health`: the model, the workers and pairs, and the batchers' counts."""
        batchers = self.batchers
        counts = {
            "batches": sum(b.batches for b in batchers),
            "sentences": sum(b.sentences for b in batchers),
            "waiting": sum(b.waiting for b in batchers),
        }
        workers = {"workers": len(self.pairs[0].translators), "pairs": [pair.label for pair in self.pairs]}
        pids = [t.process.pid for b in batchers for t in b.translators if isinstance(t, WorkerTranslator)]
        if pids:
            workers["worker_pids"] = pids
        return {"status": "ok", "model": self.model, **workers, **counts}

    def served(self) -> str:
        return ", ".join(f"{pair.source} -> {pair.target}" for pair in self.named) or "none (no language pairs)"

    def pair_for(self, source: str, target: str) -> Pair:
        for pair in self.named:
            if (pair.source, pair.target) == (source, target):
                return pair
        if source not in self.sources:
            raise RequestError(f"{source} is not supported (served: {self.served()})")
        if target not in {pair.target for pair in self.named}:
            raise RequestError(f"{target} is not supported (served: {self.served()})")
        raise RequestError(
            f"{language_name(target)} ({target}) is not available as a target language from "
            f"{language_name(source)} ({source}) (served: {self.served()})"
        )

    def detect(self, text: str) -> list[dict]:
        if self.detector is None:
            raise RequestError(f"no language pairs are served (give --pair SOURCE:TARGET=FOLDER): {self.served()}")
        return self.detector(text)
