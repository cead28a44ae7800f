"""`aayn serve` under load, on loopback only: 1, 8, 32 and 128 concurrent clients, each sending test verses one
request at a time, against the torch folder and its CTranslate2 export; the same sentences through one
`Translator.translate` call (what one `aayn translate` call does) for reference. With `--arms pipeline` and
`--marian FOLDER`, also that MarianMTModel behind transformers' own translation pipeline in one process
(`benchmarks/pipeline_server.py`, run by `--pipeline_python`: a transformers 4.57 install, as 5.x has no
translation pipeline): an imported OPUS-MT folder against the model it came from.

    python benchmarks/serve_load.py [--model FOLDER|none] [--sentences 256] [--clients 1 8 32 128] [--seconds 120]
                                    [--max_queue 1024] [--overflow_queue 16] [--max_wait_ms 10] [--arms torch ct2]
                                    [--torch_threads N] [--ct2_threads N] [--torch_workers N] [--ct2_workers N]
                                    [--marian FOLDER --pipeline_python PYTHON]
                                    [--sources FILE] [--device cuda [--cuda_graphs]]

The model is the demo job's (runs/demo-bible-en-fr, what the README's first command trains) where it is there;
else, or with --model none, a demo-shaped model trained 300 steps here (`aayn.bench.decoding.train_demo_model`),
whose shorter outputs make a decoding step's fixed costs weigh more than a trained model's. Each level prints
sentences/s, p50/p95/p99 latency of a request, errors (any non-200) and wrong answers (a translation that differs
from the same sentence translated alone in the reference call; the server batches it with others, so float
rounding may in rare cases pick another token), and the clients' own CPU time (coroutines on one thread, each with
a kept-alive connection: light beside the server). A last level sends 128 clients against a queue of
--overflow_queue sentences: the overflow must be 503 with Retry-After, never a hang.
Bounded: each level stops after --sentences answers or --seconds. `--sources`: the sentences from a file (one a
line) instead of the Bible's (a machine without the Bible package: a GPU's); `--device` and `--cuda_graphs`: where
the torch arm's server and reference call translate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*flags: str, command: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    """`aayn serve FLAGS` (or `command` with the port last) on a free loopback port, once it answers /health:
    (process, url)."""
    port = free_port()
    command = (
        [*command, str(port)] if command else [sys.executable, "-m", "aayn.cli", "serve", "--port", str(port), *flags]
    )
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/health", timeout=5).read()
            return process, url
        except OSError:
            if process.poll() is not None:
                raise SystemExit(process.stderr.read()[-3000:]) from None
            time.sleep(0.2)
    raise SystemExit("the server did not start")


async def ask(streams: dict, url: str, text: str) -> tuple[int, str | None, float, str | None]:
    """One request on this client's kept-alive connection: (status, translation, seconds, Retry-After)."""
    if not streams:
        host, port = url.removeprefix("http://").split(":")
        streams["reader"], streams["writer"] = await asyncio.open_connection(host, int(port))
    reader, writer = streams["reader"], streams["writer"]
    body = json.dumps({"inputs": text}).encode()
    head = f"POST /translate HTTP/1.1\r\nHost: {url}\r\nContent-Type: application/json\r\n"
    start = time.perf_counter()
    writer.write(head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    answer = json.loads(await reader.readexactly(int(headers["content-length"])))
    seconds = time.perf_counter() - start
    if status == 200:
        return 200, answer[0]["translation_text"], seconds, None
    return status, None, seconds, headers.get("retry-after")


def level(url: str, texts: list[str], expected: dict, clients: int, seconds: float) -> dict:
    """`clients` clients (coroutines on one thread, each with its own kept-alive connection: the load generator
    shares the server's 2 cores, so it is kept light), each sending the next verse when answered, until every verse
    was answered once."""
    todo = list(texts)
    results = []

    async def client(deadline: float):
        streams = {}
        while todo and time.perf_counter() < deadline:
            text = todo.pop()
            results.append((text, *await ask(streams, url, text)))
        if streams:
            streams["writer"].close()

    async def run():
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*(client(deadline) for _ in range(clients)))

    health = lambda: json.loads(urllib.request.urlopen(url + "/health", timeout=30).read())
    before = health()
    cpu, started = time.process_time(), time.perf_counter()
    asyncio.run(run())
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    after = health()
    calls = after["batches"] - before["batches"]
    answered = [r for r in results if r[1] == 200]
    latencies = sorted(r[3] for r in answered)
    quantile = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else None
    return {
        "clients": clients,
        "answered": len(answered),
        "sentences_per_second": len(answered) / wall,
        "p50_s": quantile(0.5),
        "p95_s": quantile(0.95),
        "p99_s": quantile(0.99),
        "errors": len(results) - len(answered),
        "errors_503_with_retry_after": sum(r[1] == 503 and r[4] is not None for r in results),
        "wrong": sum(r[2] != expected[r[0]] for r in answered) if expected else None,
        "sentences_per_model_call": (after["sentences"] - before["sentences"]) / calls if calls else None,
        "client_cpu_s": cpu,
        "wall_s": wall,
    }


def levels(name: str, texts: list[str], expected: dict, args, *flags, command=None) -> list[dict]:
    """Each --clients level against one server (`aayn serve FLAGS`, or `command`), stopped after."""
    rows = []
    process, url = start(*flags, command=command)
    try:
        for clients in args.clients:
            rows.append(level(url, texts, expected, clients, args.seconds))
            print(json.dumps({"arm": name, **rows[-1]}), flush=True)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    return rows


def pipeline_arm(args, texts: list[str]) -> dict:
    """The --marian folder behind transformers' pipeline (`pipeline_server.py`), its --torch_threads; no reference
    call, so "wrong" is not counted."""
    server = [args.pipeline_python, str(Path(__file__).with_name("pipeline_server.py")), args.marian]
    if args.torch_threads:
        server[2:2] = ["--threads", args.torch_threads]
    return {"levels": levels("pipeline", texts, {}, args, command=server)}


def main() -> None:
    from aayn.bench.demo import demo_run_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=demo_run_model())
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--max_queue", type=int, default=1024)
    parser.add_argument("--overflow_queue", type=int, default=16)
    parser.add_argument("--max_wait_ms", default="10", help="the server's --max_wait_ms")
    parser.add_argument("--arms", nargs="+", default=["torch", "ct2"])
    parser.add_argument("--torch_threads", help="the torch server's --threads (default: all cores)")
    parser.add_argument("--ct2_threads", help="the CTranslate2 server's --threads (default: all cores)")
    parser.add_argument("--torch_workers", default="1", help="the torch server's --workers")
    parser.add_argument("--ct2_workers", default="1", help="the CTranslate2 server's --workers")
    parser.add_argument("--marian", help="the pipeline arm's MarianMTModel folder")
    parser.add_argument("--pipeline_python", default=sys.executable, help="a python with transformers 4.57")
    parser.add_argument("--sources", help="the sentences, one a line (default: the Bible's English test verses)")
    parser.add_argument("--device", default="cpu", help="the torch arm's --device")
    parser.add_argument("--cuda_graphs", action="store_true", help="the torch arm's --cuda_graphs (with cuda)")
    args = parser.parse_args()
    if "pipeline" in args.arms and not args.marian:
        parser.error("--arms pipeline serves --marian FOLDER: give it")
    args.model = None if args.model == "none" else args.model
    import torch

    from aayn.bench.decoding import serving_benchmark_inputs
    from aayn.formats import export_model
    from aayn.formats.translator import AS_SAVED, EngineOptions
    from aayn.translation.opening import open_translator

    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    if args.sources:
        folder = args.model
        with open(args.sources, encoding="utf-8") as file:
            texts = [line.strip() for line in file if line.strip()][: args.sentences]
    else:
        folder, texts = serving_benchmark_inputs(args.model, args.sentences, work)
    exported = str(work / "ct2")
    if "ct2" in args.arms:
        export_model(Path(folder), Path(exported))
    engine = {"torch": (args.device, EngineOptions(cuda_graphs=args.cuda_graphs)), "ct2": ("cpu", AS_SAVED)}
    torch_flags = ("--device", args.device, *(["--cuda_graphs"] if args.cuda_graphs else []))
    report = {"machine": f"{os.cpu_count()} cores, torch {torch.__version__}", "model": folder, "arms": {},
              "device": args.device, "cuda_graphs": args.cuda_graphs}  # fmt: skip
    report["sentences"] = len(texts)
    for name, path in (("torch", folder), ("ct2", exported), ("pipeline", args.marian)):
        if name not in args.arms:
            continue
        if name == "pipeline":
            report["arms"][name] = pipeline_arm(args, texts)
            continue
        translator = open_translator([path], device=engine[name][0], options=engine[name][1])
        started = time.perf_counter()
        reference = translator.translate(texts)
        single_call = len(texts) / (time.perf_counter() - started)
        del translator
        expected = dict(zip(texts, reference))
        threads = getattr(args, f"{name}_threads")
        flags = ("--max_wait_ms", args.max_wait_ms, "--workers", getattr(args, f"{name}_workers"))
        flags += torch_flags if name == "torch" else ()
        flags += ("--threads", threads) if threads else ()
        label = f"torch ({args.device}{', cuda_graphs' if args.cuda_graphs else ''})" if name == "torch" else name
        rows = levels(label, texts, expected, args, "--model", path, "--max_queue", str(args.max_queue), *flags)
        process, url = start("--model", path, "--max_queue", str(args.overflow_queue), *flags)
        try:
            overflow = level(url, texts, expected, 128, args.seconds)
            print(json.dumps({"arm": label, "overflow_queue": args.overflow_queue, **overflow}), flush=True)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=120)
        report["arms"][name] = {"single_call_sentences_per_second": single_call, "levels": rows, "overflow": overflow}
    print(json.dumps(report, indent=1))
    for name, arm in report["arms"].items():
        if name == "pipeline":
            print("\npipeline (transformers' translation pipeline, one call at a time, MarianMTModel)")
            for row in arm["levels"]:
                print(f"| {row['clients']} | {row['sentences_per_second']:.1f} | {row['p50_s']:.3f} | "
                      f"{row['p95_s']:.3f} | {row['errors']} |")  # fmt: skip
            continue
        threads, one_call = getattr(args, f"{name}_threads") or "default", arm["single_call_sentences_per_second"]
        workers = getattr(args, f"{name}_workers")
        print(
            f"\n{name} (server --workers {workers}, --threads {threads}): one translate call {one_call:.1f} sentences/s"
        )
        columns = "clients | sentences/s | / one call | p50 s | p95 s | p99 s | errors | wrong | per model call"
        print(f"| {columns} | clients' CPU s / wall |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for row in [*arm["levels"], {**arm["overflow"], "clients": f"128, queue {args.overflow_queue}"}]:
            ratio = row["sentences_per_second"] / arm["single_call_sentences_per_second"]
            print(
                f"| {row['clients']} | {row['sentences_per_second']:.1f} | {ratio:.2f} | {row['p50_s']:.3f} | "
                f"{row['p95_s']:.3f} | {row['p99_s']:.3f} | {row['errors']} ({row['errors_503_with_retry_after']} "
                f"503) | {row['wrong']} | {row['sentences_per_model_call'] or 0:.1f} | {row['client_cpu_s']:.2f} / "
                f"{row['wall_s']:.2f} |"
            )


if __name__ == "__main__":
    main()
