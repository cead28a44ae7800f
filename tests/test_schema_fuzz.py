"""`aayn serve` against its own OpenAPI document (`/spec`), by a tool: schemathesis' command line with every check
(`not_a_server_error`, the status, content type, header and schema conformance checks, `positive_data_acceptance`:
a request the document allows is answered, `negative_data_rejection`: one it does not is refused, ...), in positive
and negative generation, over every operation and body encoding (JSON, urlencoded and multipart forms), in its
coverage, fuzzing and stateful phases (the stateful one follows /spec's link from translate_file's answer to
download_file). The document states what the server takes: lengths and counts within its limits, the served
languages, the glossary's forms, patterns, enums, the media types a document is read as. The
server runs in a subprocess on loopback; the run is bounded in examples and seeded, so it is the same every time."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from server_helpers import Server

pytest.importorskip("schemathesis")
pytest.importorskip("starlette")

CONFIG = """
[checks]
enabled = true
"""
# What a part of each text media type the document lists for translate_file's file holds: UTF-8 text (a
# `format: binary` part is otherwise any bytes, which no text format is). Registered the way schemathesis' docs give
# for formats a server reads; the archive formats (.docx, ...) and subtitles get no strategy, so schemathesis sends
# the text ones. Its coverage phase (4.32) builds such a form with every other required field "" whatever its schema
# (an enum of languages here, which "" is not): the hook gives those fields their schema's first enum value instead.
HOOKS = """
import schemathesis
from hypothesis import strategies as st
from schemathesis.specs.openapi.coverage import _operation

text = st.text(min_size=1, max_size=300).map(lambda text: text.encode("utf-8"))
for media_type in ("text/plain", "text/html"):
    schemathesis.openapi.media_type(media_type, text)

built = _operation._generate_multipart_body_from_custom_strategies


def schema_valid(body):
    made = built(body)
    if made is not None:
        for name, value in made[0].items():
            enum = body.form_properties.get(name, {}).get("enum")
            if value == "" and enum:
                made[0][name] = enum[0]
    return made


_operation._generate_multipart_body_from_custom_strategies = schema_valid
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
    (tmp_path / "document_media_types.py").write_text(HOOKS)
    env = dict(os.environ, SCHEMATHESIS_HOOKS="document_media_types", PYTHONPATH=str(tmp_path))
    command = [str(Path(sys.executable).with_name("st")), "--config-file", str(config), "run", running.url + "/spec",
               "--mode", "all", "--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--continue-on-failure",
               "--seed", "1", "--request-timeout", "60"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said[-8000:]
    assert "Tested: 10" in said, said[-3000:]  # every operation but /spec itself
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in said, said[-3000:]
    print(said[said.find("SUMMARY") :])
