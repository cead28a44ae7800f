"""The `aayn serve` application: the routes, and nothing a request shape owns. `POST /translate` goes to the room
of its shape (`room_for`: a JSON body with `inputs` is the Hub's, `hub_api.py`; the rest LibreTranslate's,
`libretranslate.py`), LibreTranslate's other endpoints to its room, `/health` to the service (`service.py`); the
page at `/`, the OpenAPI document, CORS as LibreTranslate allows it, and the server's lifetime (SIGTERM answers what
is in flight, then exits 0)."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

from . import files, hub_api, libretranslate, suggestions
from .batcher import one_line
from .keys import Access
from .libretranslate import read_fields
from .openapi import openapi
from .service import Pair, Service
from .settings import RequestError, ServeSettings

BODY_LIMIT = 8 * 1024 * 1024  # a /translate or /detect body (64 texts of 2,000 characters are about 0.5 MB)


def room_for(body: bytes, content_type: str):
    """Which request shape a `POST /translate` is in, and its request as that room reads it: a JSON object
    without `inputs`, or a form or a query string, is LibreTranslate's; anything else the Hub's (which names its
    own faults of JSON)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
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


async def translate(request):
    return json_response(*await answered(translated(request.app.state.service, request)))


async def translated(service, request):
    """`POST /translate` in the room of its shape."""
    body, content_type = await limited_body(request, BODY_LIMIT, 413), content_type_of(request)
    room, data = room_for(body, content_type)
    if room is hub_api:
        return await hub_api.translate(service, body, request)
    fields = data if data is not None else read_fields(body, content_type, request.url.query)
    return await libretranslate.translate(service, fields, request)


async def limited_body(request, limit: int, status: int) -> bytes:
    """The request's body, or RequestError (`status`) as soon as it is over `limit` bytes (declared or sent)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(f"Invalid request: the body has {declared} bytes, at most {limit}", status)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(f"Invalid request: the body is over {limit} bytes", status)
        chunks.append(chunk)
    return b"".join(chunks)


async def detect(request):
    return json_response(*await answered(detected(request.app.state.service, request)))


async def detected(service, request):
    body = await limited_body(request, BODY_LIMIT, 413)
    return libretranslate.detect(service, read_fields(body, content_type_of(request), request.url.query), request)


async def suggest(request):
    return json_response(*await answered(suggested(request.app.state.service, request)))


async def suggested(service, request):
    body = await limited_body(request, BODY_LIMIT, 413)
    fields = read_fields(body, content_type_of(request), request.url.query)
    return await asyncio.get_running_loop().run_in_executor(None, suggestions.suggest, service, fields, request)


async def translate_file(request):
    return json_response(*await answered(file_translated(request.app.state.service, request)))


async def file_translated(service, request):
    body = await limited_body(request, service.settings.max_file_bytes + 65536, 400)  # the form around the file
    return await files.translate_file(service, read_fields(body, content_type_of(request), request.url.query), request)


async def download_file(request):
    from starlette.responses import Response

    service, name = request.app.state.service, request.path_params["filename"]
    answer, status, headers = await answered(lambda: (files.download_file(service, name), 200))
    if status != 200:
        return json_response(answer, status, headers)
    data, download = answer
    disposition = f"attachment; filename*=UTF-8''{quote(download)}"
    return Response(data, media_type="application/octet-stream", headers={"Content-Disposition": disposition})


async def languages(request):
    return json_response(libretranslate.languages(request.app.state.service))


async def frontend_settings(request):
    return json_response(libretranslate.frontend_settings(request.app.state.service))


async def page(request):
    from starlette.responses import HTMLResponse

    from .page import PAGE

    access = request.app.state.service.access  # keyless requests from the page carry --require_api_key_secret's
    return HTMLResponse(PAGE.replace("__SECRET__", access.secret if access.require_secret else ""))


async def healthy(request):
    return json_response(request.app.state.service.health())


async def schema(request):
    service = request.app.state.service
    return json_response(openapi(service.settings.metrics, service.limits()))


def content_type_of(request) -> str:
    return request.headers.get("content-type", "")


def json_response(answer, status: int = 200, headers: dict | None = None):
    from starlette.responses import JSONResponse

    return JSONResponse(answer, status, headers=headers)


ROUTES = [
    ("/", page, "GET"),
    ("/translate", translate, "POST"),
    ("/languages", languages, "GET"),
    ("/detect", detect, "POST"),
    ("/frontend/settings", frontend_settings, "GET"),
    ("/suggest", suggest, "POST"),
    ("/translate_file", translate_file, "POST"),
    ("/download_file/{filename}", download_file, "GET"),
    ("/health", healthy, "GET"),
    ("/openapi.json", schema, "GET"),
    ("/spec", schema, "GET"),  # where LibreTranslate serves its document
]


def build_app(pairs: list[Pair], settings: ServeSettings, access: Access | None = None):
    """The Starlette application serving `pairs` (a batcher per model)."""
    import contextlib

    from starlette.applications import Starlette
    from starlette.routing import Route

    service = Service(pairs, settings, access)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        for batcher in service.batchers:
            batcher.start()
        service.files = files.Files(settings.files_expire_s)
        yield
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, batcher.stop) for batcher in service.batchers))
        service.files.close()

    routes = [Route(path, handler, methods=[method]) for path, handler, method in ROUTES]
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
