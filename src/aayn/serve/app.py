"""The `aayn serve` application: the routes, and nothing a request shape owns. `POST /translate` goes to the room
of its shape (`room_for`: a JSON body with `inputs` is the Hub's, `hub_api.py`; the rest LibreTranslate's,
`libretranslate.py`), LibreTranslate's other endpoints to its room, `/health` to the service (`service.py`); the
page at `/`, the OpenAPI document, CORS as LibreTranslate allows it, and the server's lifetime (SIGTERM answers what
is in flight, then exits 0)."""

from __future__ import annotations

import asyncio
import json

from . import hub_api, libretranslate
from .batcher import one_line
from .keys import Access
from .libretranslate import read_fields
from .openapi import openapi
from .service import Pair, Service
from .settings import RequestError, ServeSettings


def room_for(body: bytes, content_type: str):
    """Which request shape a `POST /translate` is in, and its request as that room reads it: a JSON object
    without `inputs`, or a form or a query string, is LibreTranslate's; anything else the Hub's (which names its
    own faults of JSON)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict) and "inputs" not in data:
        return libretranslate, data
    if data is None and "json" not in content_type:
        return libretranslate, None  # its fields are read with the query string, below
    return hub_api, body


async def answered(work) -> tuple[object, int, dict | None]:
    """(answer, status, headers) of a room's `work` (a coroutine or a callable): a RequestError is its own
    status and one line; any other fault of the model answers this request 500 and the server goes on."""
    try:
        answer, status = (await work) if asyncio.iscoroutine(work) else work()
    except RequestError as error:
        return {"error": str(error)}, error.status, error.headers
    except Exception as error:  # noqa: BLE001
        return {"error": f"Cannot translate text: {one_line(error)}"}, 500, None
    return answer, status, None


def build_app(pairs: list[Pair], settings: ServeSettings, access: Access | None = None):
    """The Starlette application serving `pairs` (each with its own batcher)."""
    import contextlib

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Route

    from .page import PAGE

    service = Service(pairs, settings, access)

    async def translate(request: Request):
        body, content_type = await request.body(), request.headers.get("content-type", "")
        room, data = room_for(body, content_type)
        if room is hub_api:
            work = hub_api.translate(service, body, request)
        else:
            work = libre_translate(data, body, content_type, request)
        answer, status, headers = await answered(work)
        return JSONResponse(answer, status, headers=headers)

    async def libre_translate(data, body: bytes, content_type: str, request: Request):
        fields = data if data is not None else read_fields(body, content_type, request.url.query)
        return await libretranslate.translate(service, fields, request)

    async def languages(request: Request):
        return JSONResponse(libretranslate.languages(service))

    async def detect(request: Request):
        body, content_type = await request.body(), request.headers.get("content-type", "")
        query = request.url.query
        answer, status, headers = await answered(
            lambda: libretranslate.detect(service, read_fields(body, content_type, query), request)
        )
        return JSONResponse(answer, status, headers=headers)

    async def frontend_settings(request: Request):
        return JSONResponse(libretranslate.frontend_settings(service))

    async def page(request: Request):
        access = service.access  # the page's keyless requests carry the secret --require_api_key_secret asks for
        return HTMLResponse(PAGE.replace("__SECRET__", access.secret if access.require_secret else ""))

    async def healthy(request: Request):
        return JSONResponse(service.health())

    async def schema(request: Request):
        return JSONResponse(openapi(metrics=settings.metrics))

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
        Route("/spec", schema, methods=["GET"]),  # where LibreTranslate serves its document
    ]
    middleware = [cors(), *measured(service, routes)]  # with --metrics, GET /metrics added to the routes
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.service = service
    return app


def measured(service: Service, routes: list) -> list:
    """With `--metrics`: `GET /metrics` added to `routes`, and the middleware that counts every request."""
    if not service.settings.metrics:
        return []
    from starlette.middleware import Middleware
    from starlette.routing import Route

    from .metrics import Metrics, endpoint

    service.metrics = Metrics({route.path for route in routes} | {"/metrics"}, service.pairs)
    routes.append(Route("/metrics", endpoint(service.metrics, service.settings.metrics_auth_token), methods=["GET"]))
    return [Middleware(service.metrics.measure)]


def cors():
    """CORS as LibreTranslate's `after_request` allows it: any origin, GET and POST, its headers, 20 days."""
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware

    return Middleware(
        CORSMiddleware,
        allow_origins=["*"],
        allow_methods=["GET", "POST"],
        allow_credentials=True,
        allow_headers=["Authorization", "Content-Type"],
        expose_headers=["Authorization"],
        max_age=60 * 60 * 24 * 20,
    )


def serve(pairs: list[Pair], settings: ServeSettings, host: str, port: int, access: Access | None = None) -> None:
    import signal

    import uvicorn

    app = build_app(pairs, settings, access)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again to the handler it found: one that
    # returns lets the command end with 0 (the default one would end it as killed)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=60)
