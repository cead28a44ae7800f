"""`aayn serve`: aayn models behind HTTP, for the clients translation teams use. One `POST /translate` speaks both
LibreTranslate's API (`libretranslate.py`: what Mastodon, Discourse, Nextcloud, `libretranslatepy` and the like
send) and the Hub's inference shape (`hub_api.py`); `GET /languages`, `POST /detect`, `GET /frontend/settings`,
`GET /health`, `GET /openapi.json`, and a page at `/` (`page.py`).

The rooms: the API-neutral core (`settings.py`: limits and errors; `service.py`: the served pairs and what every
shape asks of them; `batcher.py`: each pair's batcher, which decodes concurrent requests together through the same
`Translator` as `aayn translate`; `detect.py`), one room per request shape that owns its fields, answers, errors and
part of the OpenAPI document (`hub_api.py`, `libretranslate.py`), and `app.py`, the routes. Inline markup is
`aayn.translation.markup` (`aayn translate --html` uses it too)."""

from .app import build_app, serve
from .batcher import Batcher, Job, WorkerTranslator, describe, one_line, share_out, start_workers
from .hub_api import read_request
from .keys import Access, KeyDatabase
from .openapi import openapi
from .service import Pair, Service
from .settings import RequestError, ServeSettings

__all__ = [
    "Access",
    "Batcher",
    "Job",
    "KeyDatabase",
    "Pair",
    "RequestError",
    "ServeSettings",
    "Service",
    "WorkerTranslator",
    "build_app",
    "describe",
    "one_line",
    "openapi",
    "read_request",
    "serve",
    "share_out",
    "start_workers",
]
