"""`aayn serve` in a subprocess, asked over real HTTP (urllib): shared by the server's tests."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`aayn serve` in a subprocess, until stopped; `url` once it answers /health."""

    def __init__(self, folder, *flags, command: list[str] | None = None):
        """`folder`: the --model (None: the flags name what is served, --pair); `command`: what runs aayn's command
        line (default: `python -m aayn.cli`)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
        model = ["--model", str(folder)] if folder is not None else []
        command = [*(command or [sys.executable, "-m", "aayn.cli"]), "serve", *model, "--port", str(self.port)]
        command += map(str, flags)
        # its output to files, not pipes: a pipe nobody reads fills after 64 KB of access log (a fuzzer's thousand
        # requests), and the server then blocks on its next log line
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115  read and closed with the server
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited: {self.output()[-3000:]}")
            try:
                self.get("/health")
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("the server did not answer /health in 120 s")

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return json.loads(response.read())

    def post(
        self,
        body,
        raw: bool = False,
        path: str = "/translate",
        content_type: str = "application/json",
        headers: dict | None = None,
    ) -> tuple[int, dict, dict]:
        """(status, JSON answer, headers in lower case) of a POST of `body` (JSON-encoded unless `raw`)."""
        data = body if raw else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, {"Content-Type": content_type, **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, json.loads(response.read()), {k.lower(): v for k, v in response.headers.items()}
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read()), {k.lower(): v for k, v in error.headers.items()}

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> tuple[int, str]:
        """(the exit code, what the server said on stdout and stderr)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)
        return self.process.returncode, self.output()
