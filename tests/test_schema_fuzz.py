"""`aayn serve` against its own OpenAPI document, by a tool (schemathesis): every operation the document lists is
called with requests generated from it (valid and invalid bodies, forms and query strings, bounded in number and
time), and every answer must be no server error (5xx), have a status and content type the document lists for it,
and match the document's schema for that status. The server runs in a subprocess on loopback."""

import pytest
from server_helpers import Server

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("starlette")
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

MAX_EXAMPLES = 25
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def running(saved):
    server = Server(None, "--pair", f"en:fr={saved[0]}", "--max_wait_ms", 2, "--max_queue", 4096)
    yield server
    assert server.stop()[0] == 0


def test_every_operation_answers_as_its_document_says(running):
    """Each operation's cases drawn by hypothesis from the document (schemathesis' strategy: valid and invalid
    bodies), at most MAX_EXAMPLES per operation; the first failing check fails the test with its case."""
    schema = schemathesis.openapi.from_url(running.url + "/spec")  # it names no server: calls go to `running`
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = sorted(operation.label for operation in operations)
    assert len(operations) >= 9, ", ".join(labels)  # every operation but /spec itself (the document schemathesis read)

    calls, statuses = {}, set()
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def answers_as_documented(case):
            response = case.call_and_validate(base_url=running.url, checks=CHECKS, timeout=60)
            calls[case.operation.label] = calls.get(case.operation.label, 0) + 1
            statuses.add((case.operation.label, response.status_code))

        answers_as_documented()
    assert calls["POST /translate"] >= MAX_EXAMPLES // 2 and calls["POST /translate_file"] >= MAX_EXAMPLES // 2, calls
    assert ("POST /translate", 400) in statuses and ("GET /languages", 200) in statuses, sorted(statuses)
    print(sum(calls.values()), "calls:", calls, sorted(statuses))
