"""`aayn serve`: a model folder behind HTTP, the way the Hub's inference API answers translation requests.

`POST /translate` takes `{"inputs": "text" or ["text", ...], "parameters": {...}}` and answers
`[{"translation_text": "..."}, ...]` in input order (with `num_return_sequences` above 1: a list per input, each
hypothesis with its `score`); `GET /health` says what is loaded; `GET /openapi.json` describes both.

Sentences of concurrent requests wait at most `max_wait_ms` in a bounded queue, then one worker thread (the event
loop never runs the model) translates those with the same parameters together through the same `Translator` as
`aayn translate` (`aayn.translator`): sorted by length, one model call per batch of at most `batch_tokens`. A full
queue answers 503 with Retry-After; a bad request 400 or 413 with one line; a model error 500 with one line, and
the worker goes on. A client that goes away costs only its own sentences that were not decoded yet. SIGTERM
(uvicorn's graceful shutdown) stops taking requests, answers those in flight, and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import math
import queue
import threading
import time
from dataclasses import dataclass, field

from .translator import Translator

# the parameters a request may set, with what each must be (the generation options `aayn translate` takes)
PARAMETERS = {
    "num_beams": "an integer >= 1",
    "length_penalty": "a finite number",
    "max_new_tokens": "an integer >= 1",
    "num_return_sequences": "an integer >= 1, at most num_beams",
}


class RequestError(ValueError):
    """What is wrong with a request, in one line, and the HTTP status that says so."""

    def __init__(self, message: str, status: int = 400, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


@dataclass
class ServeSettings:
    batch_tokens: int = 4096
    max_wait_ms: float = 10.0
    max_queue: int = 1024  # sentences waiting or being decoded
    max_sentences: int = 64  # per request
    max_chars: int = 2000  # per sentence


def read_request(body: bytes, settings: ServeSettings) -> tuple[list[str], dict]:
    """(the texts, the generation options) of a request body (one text alone is a list of one, as the Hub's API
    answers it), or RequestError."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise RequestError(f"the body is not JSON ({error})") from None
    if not isinstance(request, dict) or "inputs" not in request:
        raise RequestError('the body must be a JSON object with "inputs" (a text or a list of texts)')
    unknown = sorted(set(request) - {"inputs", "parameters", "options"})
    if unknown:
        raise RequestError(f"unknown field {unknown[0]!r} (the body takes inputs and parameters)")
    texts = [request["inputs"]] if isinstance(request["inputs"], str) else request["inputs"]
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise RequestError('"inputs" must be a text or a list of texts')
    if len(texts) > settings.max_sentences:
        raise RequestError(f"{len(texts)} inputs: at most {settings.max_sentences} a request (--max_sentences)", 413)
    for i, text in enumerate(texts):
        if len(text) > settings.max_chars:
            raise RequestError(f"input {i} has {len(text)} characters: at most {settings.max_chars} (--max_chars)", 413)
    return texts, read_parameters(request.get("parameters") or {})


def read_parameters(parameters) -> dict:
    if not isinstance(parameters, dict):
        raise RequestError('"parameters" must be a JSON object')
    for name, value in parameters.items():
        if name not in PARAMETERS:
            raise RequestError(f"unknown parameter {name!r} (known: {', '.join(PARAMETERS)})")
        if name == "length_penalty":
            good = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            good = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        if not good:
            raise RequestError(f"parameter {name} must be {PARAMETERS[name]}, got {json.dumps(value)}")
    beams, returned = parameters.get("num_beams"), parameters.get("num_return_sequences", 1)
    if beams is not None and returned > beams:
        raise RequestError(f"parameter num_return_sequences={returned} exceeds num_beams={beams}")
    return dict(parameters)


@dataclass
class Job:
    """One request's sentences, waiting for the worker; `answer` is set from the worker thread."""

    texts: list[str]
    options: dict
    loop: asyncio.AbstractEventLoop
    answer: asyncio.Future
    abandoned: bool = False  # the client went away before its sentences were decoded
    queued: float = field(default_factory=time.perf_counter)

    def settle(self, result=None, error: BaseException | None = None) -> None:
        def set_answer():
            if not self.answer.done():
                self.answer.set_exception(error) if error is not None else self.answer.set_result(result)

        self.loop.call_soon_threadsafe(set_answer)


class Batcher:
    """The one thread that runs the model: it takes the jobs that arrive within `max_wait_ms` of the first one
    waiting (or of the end of the last model call, where that is later; once the clients that call answered are
    back, only those already queued), and translates the sentences of the jobs that share their parameters in one
    `Translator.nbest` call (which sorts them by length and cuts batches of `batch_tokens`)."""

    def __init__(self, translator: Translator, settings: ServeSettings):
        self.translator, self.settings = translator, settings
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.waiting = 0  # sentences queued or being decoded
        self.lock = threading.Lock()
        # the only thread that runs torch: a second thread running it would start a second OpenMP team, and with more
        # OpenMP threads than cores their workers stop spinning between ops, so every op waits for them to wake
        self.thread = threading.Thread(target=self._run, name="aayn-serve-batcher", daemon=True)
        self.last_call_end = 0.0
        self.expected = math.inf  # requests the next batch waits for (before any call: wait out max_wait_ms)
        self.batches = self.sentences = 0  # translator calls made (each of one or more requests), sentences decoded

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Translate what is queued, then end the thread."""
        self.jobs.put(None)
        self.thread.join()

    def submit(self, job: Job) -> None:
        with self.lock:
            if self.waiting + len(job.texts) > self.settings.max_queue:
                raise RequestError(
                    f"the queue is full ({self.waiting} sentences waiting, --max_queue {self.settings.max_queue}); "
                    "retry shortly",
                    503,
                    {"Retry-After": "1"},
                )
            self.waiting += len(job.texts)
        self.jobs.put(job)

    def _run(self) -> None:
        while True:
            first = self.jobs.get()
            if first is None:
                return
            # the wait runs from the later of the first job's arrival and the end of the last model call: the
            # clients just answered get to send their next requests into this batch, not the one after. Once those
            # are back (as many requests wait as were queued at the end of that call plus those it answered), it
            # takes what is queued and goes without waiting out the rest
            start = max(first.queued, self.last_call_end)
            jobs, deadline, stop = [first], start + self.settings.max_wait_ms / 1000, False
            while (left := deadline - time.perf_counter()) > 0:
                try:
                    job = self.jobs.get(timeout=left) if len(jobs) < self.expected else self.jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                jobs.append(job)
            groups: dict[str, list[Job]] = {}
            for job in jobs:
                groups.setdefault(json.dumps(job.options, sort_keys=True), []).append(job)
            for group in groups.values():
                self._translate(group)
            self.last_call_end, self.expected = time.perf_counter(), self.jobs.qsize() + len(jobs)
            if stop:
                return

    def _translate(self, jobs: list[Job]) -> None:
        live = [job for job in jobs if not job.abandoned]
        try:
            if live:
                options = dict(live[0].options)
                nbest = options.pop("num_return_sequences", 1)
                texts = [text for job in live for text in job.texts]
                best = self.translator.nbest(texts, nbest, batch_tokens=self.settings.batch_tokens, **options)
                self.batches, self.sentences = self.batches + 1, self.sentences + len(texts)
                start = 0
                for job in live:
                    job.settle(best[start : start + len(job.texts)])
                    start += len(job.texts)
        except Exception as error:  # noqa: BLE001  the model's fault answers its requests 500; the worker goes on
            for job in live:
                job.settle(error=error)
        finally:
            with self.lock:
                self.waiting -= sum(len(job.texts) for job in jobs)


def describe(translator: Translator, names: list[str]) -> dict:
    """What /health says of the model: its kind, folders, parameters and direction (where its card names one)."""
    from pathlib import Path

    from .hub import card_metadata

    models = getattr(translator, "models", None)
    kind = "ctranslate2" if models is None else ("aayn ensemble" if len(models) > 1 else models[0].config.model_type)
    info = {"type": kind, "models": names}
    if models is not None:
        info["parameters"] = sum(p.numel() for p in models[0].parameters())
    card = card_metadata(names[0]) if Path(names[0]).is_dir() else None
    if card is not None:
        info["direction"] = f"{card['source_lang']} -> {card['target_lang']}"
    return info


def openapi() -> dict:
    """The OpenAPI description of the endpoints (served at /openapi.json)."""
    texts = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    parameters = {
        "num_beams": {"type": "integer", "minimum": 1},
        "length_penalty": {"type": "number", "description": "GNMT's alpha"},
        "max_new_tokens": {"type": "integer", "minimum": 1},
        "num_return_sequences": {"type": "integer", "minimum": 1},
    }
    body = {
        "type": "object",
        "required": ["inputs"],
        "properties": {"inputs": texts, "parameters": {"type": "object", "properties": parameters}},
    }
    one = {"type": "object", "properties": {"translation_text": {"type": "string"}, "score": {"type": "number"}}}
    answers = {"type": "array", "items": {"oneOf": [one, {"type": "array", "items": one}]}}
    responses = {
        "200": {
            "description": "one answer per input, in input order (num_return_sequences > 1: a list per input)",
            "content": {"application/json": {"schema": answers}},
        },
        "400": {"description": "a bad request, named in one line"},
        "413": {"description": "too many inputs or too long an input"},
        "500": {"description": "the model failed; the server goes on"},
        "503": {"description": "the queue is full: retry after Retry-After seconds"},
    }
    translate = {
        "summary": "Translate texts with the paper's search (beam 4, GNMT's penalty, source + 50 tokens)",
        "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
        "responses": responses,
    }
    health = {
        "summary": "Whether the model is loaded, and what it is",
        "responses": {"200": {"description": "status, model type, folders, parameters, direction"}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "aayn serve", "version": "1"},
        "paths": {"/translate": {"post": translate}, "/health": {"get": health}},
    }


async def disconnected(request) -> None:
    """Returns once the client has gone (no polling: the server's next message after the body is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def build_app(translator: Translator, names: list[str], settings: ServeSettings):
    """The Starlette application serving `translator`."""
    import contextlib

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    batcher = Batcher(translator, settings)
    health = {"status": "ok", "model": describe(translator, names)}

    async def translate(request: Request):
        try:
            texts, options = read_request(await request.body(), settings)
            loop = asyncio.get_running_loop()
            job = Job(texts, options, loop, loop.create_future())
            batcher.submit(job)
        except RequestError as error:
            return JSONResponse({"error": str(error)}, error.status, headers=error.headers)
        # the answer, or the client gone: once the body is read, the next message the server gets is a disconnect
        gone = asyncio.ensure_future(disconnected(request))
        await asyncio.wait({job.answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not job.answer.done():
            job.abandoned = True
            return JSONResponse({"error": "the client went away"}, 499)
        gone.cancel()
        error = job.answer.exception()
        if error is not None:
            message = " ".join(str(error).split()) or type(error).__name__
            return JSONResponse({"error": f"the model failed: {message}"}, 500)
        best = job.answer.result()
        returned = options.get("num_return_sequences", 1)
        if returned == 1:
            answers = [{"translation_text": hypotheses[0][1]} for hypotheses in best]
        else:
            answers = [
                [{"translation_text": text, "score": score} for score, text in hypotheses] for hypotheses in best
            ]
        return JSONResponse(answers)

    async def healthy(request: Request):
        counts = {"batches": batcher.batches, "sentences": batcher.sentences, "waiting": batcher.waiting}
        return JSONResponse({**health, **counts})

    async def schema(request: Request):
        return JSONResponse(openapi())

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        await asyncio.get_running_loop().run_in_executor(None, batcher.stop)

    routes = [
        Route("/translate", translate, methods=["POST"]),
        Route("/health", healthy, methods=["GET"]),
        Route("/openapi.json", schema, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.batcher = batcher
    return app


def serve(translator: Translator, names: list[str], settings: ServeSettings, host: str, port: int) -> None:
    import signal

    import uvicorn

    app = build_app(translator, names, settings)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again to the handler it found: one that
    # returns lets the command end with 0 (the default one would end it as killed)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=60)
