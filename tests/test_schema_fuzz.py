"""`aayn serve` against its own OpenAPI document (`/spec`), by a tool: schemathesis' command line with every check
(`not_a_server_error`, the status, content type, header and schema conformance checks, `positive_data_acceptance`:
a request the document allows is answered, `negative_data_rejection`: one it does not is refused, ...), in positive
and negative generation, over every operation and body encoding (JSON, urlencoded and multipart forms), in its
coverage, fuzzing and stateful phases (the stateful one follows /spec's link from translate_file's answer to
download_file). The document states what the server takes: lengths and counts within its limits, the served
languages, the glossary's forms, patterns, enums. One check is left out for one operation, saying why (CONFIG). The
server runs in a subprocess on loopback; the run is bounded in examples and seeded, so it is the same every time."""

import subprocess
import sys
from pathlib import Path

import pytest
from server_helpers import Server

pytest.importorskip("schemathesis")
pytest.importorskip("starlette")

# schemathesis names a generated file part after its field and its bytes' signature ("file", "file.png"), never
# ".txt" or ".docx", and a file's format is its name's extension, which no OpenAPI keyword constrains: every file it
# makes up is refused (400 "file format not supported"), rightly, so translate_file is held to every check but
# positive_data_acceptance (tests/test_libretranslate.py translates real files through it)
CONFIG = """
[checks]
enabled = true

[[operations]]
include-operation-id = "translate_file"
checks.positive_data_acceptance.enabled = false
"""
MAX_EXAMPLES = 40


@pytest.fixture(scope="module")
def running(saved):
    server = Server(None, "--pair", f"en:fr={saved[0]}", "--max_wait_ms", 2, "--max_queue", 4096)
    yield server
    assert server.stop()[0] == 0


def test_every_operation_answers_as_its_document_says_to_valid_and_invalid_requests(running, tmp_path):
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [str(Path(sys.executable).with_name("st")), "--config-file", str(config), "run", running.url + "/spec",
               "--mode", "all", "--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--continue-on-failure",
               "--seed", "1", "--request-timeout", "60"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said[-8000:]
    assert "Tested: 10" in said, said[-3000:]  # every operation but /spec itself
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in said, said[-3000:]
    print(said[said.find("SUMMARY") :])
