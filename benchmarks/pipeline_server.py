"""The baseline `benchmarks/serve_load.py` serves against: a model behind transformers' own
`pipeline("translation")` in one process, as a team would put a `MarianMTModel` (an OPUS-MT folder) on HTTP
without aayn: a threaded standard-library server, one pipeline call per request, calls taken one at a time (a lock:
concurrent calls would share the same cores' threads), the model's own generation config (its beam, its lengths).
It answers the shape aayn serve answers the Hub's: `POST /translate {"inputs": TEXT}` -> `[{"translation_text": ...}]`,
and `GET /health` with the calls and sentences counted. transformers 5.x removed the translation pipeline: run this
with a 4.57 install.

    python benchmarks/pipeline_server.py FOLDER PORT [--threads N]
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("port", type=int)
    parser.add_argument("--threads", type=int, help="torch's threads (default: torch's)")
    args = parser.parse_args()
    import torch
    from transformers import pipeline

    if args.threads:
        torch.set_num_threads(args.threads)
    translate = pipeline("translation", model=args.folder)
    lock, counts = threading.Lock(), {"batches": 0, "sentences": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # kept-alive connections, as the load's clients keep them

        def answer(self, status: int, body) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.answer(200, {"status": "ok", **counts} if self.path == "/health" else {"error": "not found"})

        def do_POST(self):
            text = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"]
            with lock, torch.inference_mode():
                out = translate(text)
                counts["batches"] += 1
                counts["sentences"] += 1
            self.answer(200, out)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
