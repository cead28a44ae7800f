"""A stand-in for the Hugging Face Hub's HTTP API on 127.0.0.1, enough for `push_to_hub` (create a repository,
pre-upload, commit, read a file back): the real huggingface_hub client code talks to it when HF_ENDPOINT points
here, so tests see exactly the files and the card a push would upload, and the token it was sent with."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml


class HubStandIn:
    def __init__(self):
        self.repos: dict[str, dict[str, bytes]] = {}  # repo id -> path in repo -> content (latest commit)
        self.commits: list[dict] = []  # {"repo", "message", "files": {path: bytes}, "token"}
        self.tokens: set[str] = set()  # every bearer token received
        self.validated: list[dict] = []  # README metadata checked before commits
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _reply(self, status: int, payload=None, headers: dict | None = None, body: bytes | None = None):
                data = body if body is not None else json.dumps(payload if payload is not None else {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if body is None else "application/octet-stream")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _note_token(self):
                authorization = self.headers.get("Authorization") or ""
                if authorization.startswith("Bearer "):
                    hub.tokens.add(authorization.removeprefix("Bearer "))

            def do_POST(self):
                self._note_token()
                body = self._body()
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[:3] == ["api", "repos", "create"]:
                    request = json.loads(body or b"{}")
                    name = request.get("name", "")
                    repo = f"{request['organization']}/{name}" if request.get("organization") else name
                    hub.repos.setdefault(repo, {})
                    return self._reply(200, {"url": f"http://{self.headers['Host']}/{repo}", "name": repo})
                if parts[:2] == ["api", "validate-yaml"]:  # the Hub checks a README's metadata before a commit
                    content = json.loads(body)["content"]
                    try:
                        metadata = yaml.safe_load(content.split("---\n")[1]) if content.startswith("---\n") else {}
                    except yaml.YAMLError as error:
                        return self._reply(400, {"error": f"Invalid YAML: {error}"})
                    hub.validated.append(metadata)
                    return self._reply(200, {"errors": [], "warnings": []})
                if parts[0] == "api" and parts[1] == "models" and parts[-2] in ("preupload", "commit"):
                    repo = "/".join(parts[2:-2])
                    if parts[-2] == "preupload":
                        files = json.loads(body)["files"]
                        return self._reply(
                            200,
                            {
                                "files": [
                                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files
                                ]
                            },
                        )
                    lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                    files = {}
                    for line in lines:
                        if line["key"] == "file":
                            files[line["value"]["path"]] = base64.b64decode(line["value"]["content"])
                    header = next(line["value"] for line in lines if line["key"] == "header")
                    hub.repos.setdefault(repo, {}).update(files)
                    hub.commits.append({"repo": repo, "message": header.get("summary"), "files": files})
                    oid = hashlib.sha1(str(len(hub.commits)).encode()).hexdigest()
                    return self._reply(
                        200,
                        {
                            "commitUrl": f"http://{self.headers['Host']}/{repo}/commit/{oid}",
                            "commitOid": oid,
                            "pullRequestUrl": None,
                        },
                    )
                return self._reply(404, {"error": f"stand-in has no POST {self.path}"})

            def do_GET(self):
                self._note_token()
                parts = self.path.split("?")[0].strip("/").split("/")
                if "resolve" in parts:
                    at = parts.index("resolve")
                    repo, path = "/".join(parts[:at]), "/".join(parts[at + 2 :])
                    content = hub.repos.get(repo, {}).get(path)
                    if content is None:
                        return self._reply(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
                    digest = hashlib.sha1(content).hexdigest()
                    return self._reply(200, headers={"ETag": f'"{digest}"', "X-Repo-Commit": "0" * 40}, body=content)
                return self._reply(404, {"error": f"stand-in has no GET {self.path}"})

            do_HEAD = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:  # noqa: PYI034
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


TOKEN = "hf_TestTokenThatMustNeverBeWrittenToDisk"


def run_against(hub: HubStandIn, tmp_path: Path, *command: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_XET="1")
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_TOKEN", None)
    result = subprocess.run([sys.executable, *command], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def card_metadata(readme: bytes) -> dict:
    text = readme.decode()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


PUSH_WITHOUT_AAYN = """
import sys
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
path, repo, token = sys.argv[1:]
model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
model.push_to_hub(repo, token=token)
tokenizer.push_to_hub(repo, token=token)
assert "aayn" not in sys.modules
"""
