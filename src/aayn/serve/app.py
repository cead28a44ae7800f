"""The `aayn serve` application: one batcher per served language pair, the routes of both API shapes on the same
`POST /translate` (a JSON body with `inputs` is the Hub's, the rest LibreTranslate's), LibreTranslate's other
endpoints, the page at `/`, CORS as LibreTranslate allows it, and the server's lifetime (SIGTERM answers what is in
flight, then exits 0)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from ..languages import language_name
from ..translator import Translator
from .batcher import Batcher, Job, WorkerTranslator, describe, one_line
from .detect import Detector
from .hub_api import RequestError, ServeSettings, read_request
from .libretranslate import check_api_key, read_fields, read_translate
from .markup import Fragment
from .openapi import openapi

MAX_ALTERNATIVES = 8  # LibreTranslate's --alternatives-limit: n-best lists beyond it are refused


@dataclass
class Pair:
    """One served direction: its languages (None where the model's card names none: then it answers the Hub's
    shape only), the model folders, and the translators that decode for it (one, or worker processes)."""

    source: str | None
    target: str | None
    names: list[str]
    translators: list[Translator]
    batcher: Batcher | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return f"{self.source}:{self.target}" if self.source else ",".join(self.names)


def check_glossary(pair: Pair, glossary):
    """`glossary`, where the pair's engine can hold one (its format declares the ability), else RequestError."""
    if "glossary" not in pair.translators[0].abilities:
        raise RequestError(f"Invalid request: {pair.names[0]} translates without a glossary (its engine has none)")
    return glossary


def check_alignment(pair: Pair) -> bool:
    """Whether the pair's engine aligns (its format declares the ability), else RequestError."""
    if "alignment" not in pair.translators[0].abilities:
        raise RequestError(f"Invalid request: {pair.names[0]} gives no alignments (its engine has none)")
    return True


def hub_item(hypothesis: tuple, scored: bool) -> dict:
    """One hypothesis in the Hub's shape: its text, its score where asked for n-best, its alignment where asked."""
    item = {"translation_text": hypothesis[1]}
    if scored:
        item["score"] = hypothesis[0]
    if len(hypothesis) > 2:
        item.update(hypothesis[2].as_dict())
    return item


async def disconnected(request) -> None:
    """Returns once the client has gone (no polling: the server's next message after the body is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def translated(batcher: Batcher, texts: list[str], options: dict, request, failed: str):
    """The hypotheses of `texts` from the batcher, or None when the client went away first (its sentences are
    dropped); a full queue raises RequestError (503), a model error RequestError (500) saying `failed` and its
    line."""
    loop = asyncio.get_running_loop()
    job = Job(texts, options, loop, loop.create_future())
    batcher.submit(job)
    # the answer, or the client gone: once the body is read, the next message the server gets is a disconnect
    gone = asyncio.ensure_future(disconnected(request))
    await asyncio.wait({job.answer, gone}, return_when=asyncio.FIRST_COMPLETED)
    if not job.answer.done():
        job.abandoned = True
        return None
    gone.cancel()
    error = job.answer.exception()
    if error is not None:
        raise RequestError(f"{failed}: {one_line(error)}", 500)
    return job.answer.result()


class Service:
    """What the routes answer, for the served `pairs`."""

    def __init__(self, pairs: list[Pair], settings: ServeSettings, api_keys: frozenset | None = None):
        self.pairs, self.settings, self.api_keys = pairs, settings, api_keys
        for pair in pairs:
            pair.batcher = Batcher(pair.translators, settings)
        self.named = [pair for pair in pairs if pair.source]
        self.sources = sorted({pair.source for pair in self.named})
        self.detector = Detector(self.sources) if self.sources else None
        first = pairs[0].translators[0]
        self.health = {"status": "ok", "model": getattr(first, "description", None) or describe(first, pairs[0].names)}

    async def answer_translate(self, body: bytes, content_type: str, request) -> tuple[object, int, dict | None]:
        """`POST /translate` in either shape: (answer, status, headers). A JSON object without `inputs`, or a
        form, is LibreTranslate's; anything else the Hub's, which names its own errors of JSON."""
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            data = None
        try:
            if isinstance(data, dict) and "inputs" not in data:
                answer, status = await self.libretranslate(data, request)
            elif data is None and "json" not in content_type:  # a form or a query string: LibreTranslate's
                fields = read_fields(body, content_type, request.url.query)
                answer, status = await self.libretranslate(fields, request)
            else:
                answer, status = await self.hub(body, request)
        except RequestError as error:
            return {"error": str(error)}, error.status, error.headers
        except Exception as error:  # noqa: BLE001  the model's fault answers this request 500; the server goes on
            return {"error": f"Cannot translate text: {one_line(error)}"}, 500, None
        return answer, status, None

    def answer_detect(self, body: bytes, content_type: str, query: str = "") -> tuple[object, int]:
        """`POST /detect` (LibreTranslate's): (answer, status)."""
        try:
            fields = read_fields(body, content_type, query)
            check_api_key(fields, self.api_keys)
            if not fields.get("q") or not isinstance(fields["q"], str):
                raise RequestError("Invalid request: missing q parameter")
            return self.detect(fields["q"]), 200
        except RequestError as error:
            return {"error": str(error)}, error.status

    def answer_health(self) -> dict:
        """`GET /health`: the model, the workers and pairs, and the batchers' counts."""
        batchers = [pair.batcher for pair in self.pairs]
        counts = {
            "batches": sum(b.batches for b in batchers),
            "sentences": sum(b.sentences for b in batchers),
            "waiting": sum(b.waiting for b in batchers),
        }
        workers = {"workers": len(self.pairs[0].translators), "pairs": [pair.label for pair in self.pairs]}
        pids = [t.process.pid for b in batchers for t in b.translators if isinstance(t, WorkerTranslator)]
        if pids:
            workers["worker_pids"] = pids
        return {**self.health, **workers, **counts}

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

    def languages(self) -> list[dict]:
        return [
            {"code": source, "name": language_name(source),
             "targets": sorted(pair.target for pair in self.named if pair.source == source)}
            for source in self.sources
        ]  # fmt: skip

    def frontend_settings(self) -> dict:
        first = self.named[0] if self.named else None
        language = (
            {side: {"code": code, "name": language_name(code)}
             for side, code in (("source", first.source), ("target", first.target))}
            if first else {}
        )  # fmt: skip
        return {
            "charLimit": self.settings.max_chars, "frontendTimeout": 500, "apiKeys": self.api_keys is not None,
            "keyRequired": self.api_keys is not None, "suggestions": False, "filesTranslation": False,
            "supportedFilesFormat": [], "language": language,
        }  # fmt: skip

    def detect(self, text: str) -> list[dict]:
        if self.detector is None:
            raise RequestError(f"no language pairs are served (give --pair SOURCE:TARGET=FOLDER): {self.served()}")
        return self.detector(text)

    async def hub(self, body: bytes, request):
        texts, options = read_request(body, self.settings)
        if "glossary" in options:
            check_glossary(self.pairs[0], options["glossary"])
        if "alignment" in options:
            check_alignment(self.pairs[0])
        best = await translated(self.pairs[0].batcher, texts, options, request, "the model failed")
        if best is None:
            return {"error": "the client went away"}, 499
        if options.get("num_return_sequences", 1) == 1:
            return [hub_item(hypotheses[0], False) for hypotheses in best], 200
        return [[hub_item(hypothesis, True) for hypothesis in hypotheses] for hypotheses in best], 200

    async def libretranslate(self, fields: dict, request):
        check_api_key(fields, self.api_keys)
        asked = read_translate(fields, self.settings, MAX_ALTERNATIVES)
        detected, source = None, asked.source
        if source == "auto":
            detected = self.detect(" ".join(document_text for document_text in asked.texts))[0]
            source = detected["language"]
        pair = self.pair_for(source, asked.target)
        options = {"num_return_sequences": asked.alternatives + 1} if asked.alternatives else {}
        if asked.glossary is not None:
            options["glossary"] = check_glossary(pair, asked.glossary)
        if asked.alignment is not None:
            options["alignment"] = check_alignment(pair) and asked.alignment
        if any(isinstance(d, Fragment) for d in asked.documents) and "alignment" in pair.translators[0].abilities:
            options["alignment"] = asked.align_markup()  # inline markup placed by alignments, sentences whole
        texts = asked.texts
        try:
            best = await translated(pair.batcher, texts, options, request, "Cannot translate text") if texts else []
        except RequestError as error:
            if error.status == 503:  # a full queue: LibreTranslate's "slow down"
                raise RequestError(f"Slowdown: {error}", 429) from None
            raise
        if best is None:
            return {"error": "the client went away"}, 499
        return asked.answer(best, detected), 200


def build_app(pairs: list[Pair], settings: ServeSettings, api_keys: frozenset | None = None):
    """The Starlette application serving `pairs` (each with its own batcher)."""
    import contextlib

    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Route

    from .page import PAGE

    service = Service(pairs, settings, api_keys)

    async def translate(request: Request):
        body, content_type = await request.body(), request.headers.get("content-type", "")
        answer, status, headers = await service.answer_translate(body, content_type, request)
        return JSONResponse(answer, status, headers=headers)

    async def languages(request: Request):
        return JSONResponse(service.languages())

    async def detect(request: Request):
        content_type = request.headers.get("content-type", "")
        return JSONResponse(*service.answer_detect(await request.body(), content_type, request.url.query))

    async def frontend_settings(request: Request):
        return JSONResponse(service.frontend_settings())

    async def page(request: Request):
        return HTMLResponse(PAGE)

    async def healthy(request: Request):
        return JSONResponse(service.answer_health())

    async def schema(request: Request):
        return JSONResponse(openapi())

    @contextlib.asynccontextmanager
    async def lifespan(app):
        for pair in pairs:
            pair.batcher.start()
        yield
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, pair.batcher.stop) for pair in pairs))

    routes = [
        Route("/", page, methods=["GET"]),
        Route("/translate", translate, methods=["POST"]),
        Route("/languages", languages, methods=["GET"]),
        Route("/detect", detect, methods=["POST"]),
        Route("/frontend/settings", frontend_settings, methods=["GET"]),
        Route("/health", healthy, methods=["GET"]),
        Route("/openapi.json", schema, methods=["GET"]),
    ]
    cors = Middleware(
        CORSMiddleware,
        allow_origins=["*"],
        allow_methods=["GET", "POST"],
        allow_credentials=True,
        allow_headers=["Authorization", "Content-Type"],
        expose_headers=["Authorization"],
        max_age=60 * 60 * 24 * 20,
    )  # fmt: skip  LibreTranslate's after_request headers
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[cors])
    app.state.service = service
    return app


def serve(pairs: list[Pair], settings: ServeSettings, host: str, port: int, api_keys: frozenset | None = None) -> None:
    import signal

    import uvicorn

    app = build_app(pairs, settings, api_keys)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again to the handler it found: one that
    # returns lets the command end with 0 (the default one would end it as killed)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=60)


def read_api_keys(path: str) -> frozenset:
    """`--api_keys FILE`: one key a line (blank lines and `#` comments skipped)."""
    from pathlib import Path

    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise FileNotFoundError(f"--api_keys {path}: no such file") from None
    keys = frozenset(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise ValueError(f"--api_keys {path} holds no key (one a line)")
    return keys
