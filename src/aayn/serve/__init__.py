"""`aayn serve`: aayn models behind HTTP, for the clients translation teams use. One `POST /translate` speaks both
LibreTranslate's API (`libretranslate.py`: what Mastodon, Discourse, Nextcloud, `libretranslatepy` and the like
send) and the Hub's inference shape (`hub_api.py`); `GET /languages`, `POST /detect`, `GET /frontend/settings`,
`GET /health`, `GET /openapi.json`, and a page at `/` (`page.py`). Each served language pair has its own batcher
(`batcher.py`), which decodes concurrent requests together through the same `Translator` as `aayn translate`;
`app.py` holds the routes."""

from .app import Pair, build_app, read_api_keys, serve
from .batcher import Batcher, Job, WorkerTranslator, describe, one_line, share_out, start_workers
from .hub_api import RequestError, ServeSettings, read_request
from .openapi import openapi

__all__ = [
    "Batcher",
    "Job",
    "Pair",
    "RequestError",
    "ServeSettings",
    "WorkerTranslator",
    "build_app",
    "describe",
    "one_line",
    "openapi",
    "read_api_keys",
    "read_request",
    "serve",
    "share_out",
    "start_workers",
]
