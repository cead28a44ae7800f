"""The OpenAPI description of every endpoint of `aayn serve` (served at /openapi.json): `POST /translate` in both
request shapes, each described by its own room (`hub_api.openapi_shape`, `libretranslate.openapi_shape`), and the
other endpoints (LibreTranslate's from its room, the server's own here)."""

from __future__ import annotations

from . import files, hub_api, libretranslate, suggestions
from .settings import Limits


def openapi(metrics: bool = False, limits: Limits | None = None) -> dict:
    """The document; `metrics`: the server has `GET /metrics` (`--metrics`); `limits`: what its requests may hold
    (its character and text limits, its languages), stated so that a request the document allows is answered and
    one it does not is refused."""
    limits = limits or Limits()
    hub_body, hub_answer = hub_api.openapi_shape(limits)
    libre_body, libre_form, libre_answer = libretranslate.openapi_shape(limits)
    answers = {"oneOf": [hub_answer, libre_answer]}
    translate = {
        "summary": "Translate texts with the folder's search (in either request shape: the Hub's or LibreTranslate's)",
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"oneOf": [hub_body, libre_body]}},
                "application/x-www-form-urlencoded": {"schema": libre_form},
                "multipart/form-data": {"schema": libre_form},
            },
        },
        "responses": {
            "200": {
                "description": "one answer per input, in input order",
                "content": {"application/json": {"schema": answers}},
            },
            "400": {"description": "a bad request, named in one line"},
            "403": {"description": "an unknown API key (LibreTranslate's shape, with --api_keys)"},
            "413": {"description": "a body over 8 MB"},
            "422": {"description": "too many inputs or too long an input (the Hub's shape)"},
            "429": {"description": "the queue is full (LibreTranslate's shape)"},
            "500": {"description": "the model failed; the server goes on"},
            "503": {"description": "the queue is full (the Hub's shape): retry after Retry-After seconds"},
        },
    }
    own = {
        "/": {"get": {"summary": "A page that translates typed text", "responses": {"200": {"description": "HTML"}}}},
        "/health": {"get": {"summary": "Whether the model is loaded, and what it is",
                            "responses": {"200": {"description": "status, model, workers, pairs, counts"}}}},
        "/openapi.json": {"get": {"summary": "This description", "responses": {"200": {"description": "OpenAPI 3.1"}}}},
        "/spec": {"get": {"summary": "This description, where LibreTranslate serves its own",
                          "responses": {"200": {"description": "OpenAPI 3.1"}}}},
    }  # fmt: skip
    if metrics:
        answers = {"200": {"description": "Prometheus' text format"},
                   "401": {"description": "without --metrics_auth_token's token"}}  # fmt: skip
        summary = "Requests by endpoint and status, latency, queue depth, texts and characters translated"
        own["/metrics"] = {"get": {"summary": summary, "responses": answers}}
    paths = {
        "/translate": {"post": translate},
        **libretranslate.openapi_paths(),
        **files.openapi_paths(limits),
        **suggestions.openapi_paths(),
        **own,
    }
    return {"openapi": "3.1.0", "info": {"title": "aayn serve", "version": "1"}, "paths": paths}
