"""`GET /metrics` behind `--metrics`, as LibreTranslate offers it (Prometheus' text format; `--metrics_auth_token`:
only a client sending `Authorization: Bearer TOKEN` reads it, else 401): requests by endpoint and status, their
latency, those in flight, the sentences each pair's batcher holds, and the texts and characters translated. Each
server has its own registry (`prometheus_client`, in the `serve` extra)."""

from __future__ import annotations

import time


class Metrics:
    """The server's measures; `measure` is the ASGI middleware that counts every request."""

    def __init__(self, endpoints: set[str], pairs):
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError as error:
            raise ImportError("--metrics needs prometheus_client: pip install 'aayn[serve]'") from error
        self.endpoints = endpoints  # other paths are counted as "other": a client cannot grow the label set
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "aayn_http_requests", "Requests answered, by endpoint and status", ["endpoint", "status"], registry=registry
        )
        self.latency = Histogram(
            "aayn_http_request_duration_seconds", "Time spent answering a request", ["endpoint"], registry=registry
        )
        self.in_flight = Gauge("aayn_http_requests_in_flight", "Requests being answered", registry=registry)
        queued = Gauge(
            "aayn_queue_sentences", "Sentences waiting or being decoded, by pair", ["pair"], registry=registry
        )
        for pair in pairs:
            queued.labels(pair.label).set_function(lambda batcher=pair.batcher: batcher.waiting)
        self.texts = Counter("aayn_translated_texts", "Sentences translated, by pair", ["pair"], registry=registry)
        self.characters = Counter(
            "aayn_translated_characters", "Characters of the sentences translated, by pair", ["pair"], registry=registry
        )

    def translated(self, pair, texts: list[str]) -> None:
        self.texts.labels(pair.label).inc(len(texts))
        self.characters.labels(pair.label).inc(sum(len(text) for text in texts))

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def measure(self, app):
        """`app` with every HTTP request counted (endpoint, status, latency, in flight)."""

        async def measured(scope, receive, send):
            if scope["type"] != "http":
                return await app(scope, receive, send)
            endpoint = scope["path"] if scope["path"] in self.endpoints else "other"
            status = 500  # where the application fails before it answers

            async def sending(message):
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            start = time.perf_counter()
            self.in_flight.inc()
            try:
                await app(scope, receive, sending)
            finally:
                self.in_flight.dec()
                self.latency.labels(endpoint).observe(time.perf_counter() - start)
                self.requests.labels(endpoint, str(status)).inc()

        return measured


def endpoint(metrics: Metrics, token: str | None):
    """The `GET /metrics` route: the exposition, or 401 `Unauthorized` without the token where one is set."""
    from starlette.responses import JSONResponse, Response

    async def answer(request):
        if token and request.headers.get("authorization") != f"Bearer {token}":
            return JSONResponse({"error": "Unauthorized"}, 401)
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    return answer
