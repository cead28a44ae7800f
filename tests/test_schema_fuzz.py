"""`aayn serve` against its own OpenAPI document, by a tool (schemathesis): every operation the document lists is
called with requests generated from it (valid and invalid bodies, forms and query strings, bounded in number and
time), and every answer must be no server error (5xx), have a status and content type the document lists for it,
and match the document's schema for that status. The server runs in a subprocess on loopback."""

import pytest
from server_helpers import Server

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("starlette")
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def running(saved):
    server = Server(None, "--pair", f"en:fr={saved[0]}", "--max_wait_ms", 2, "--max_queue", 4096)
    yield server
    assert server.stop()[0] == 0


@pytest.fixture(scope="module")
def api_schema(running):
    return schemathesis.openapi.from_url(running.url + "/spec")  # it names no server: calls go to `running`


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_every_operation_answers_as_its_document_says(case, running):
    case.call_and_validate(base_url=running.url, checks=CHECKS, timeout=60)
