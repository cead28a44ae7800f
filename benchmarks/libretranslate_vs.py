"""`aayn serve` against LibreTranslate 1.9 serving the same models' Argos packages, on loopback, side by side:

1. the same requests (good ones and each kind of bad one) to both servers: the status codes and JSON keys each
   answers, and whether they agree;
2. load: 32 clients, each sending lists of 8 texts (LibreTranslate's shape, `q` a list) one request at a time until
   every text was sent, against each server in turn (the arms alternating over --rounds): texts per second and the
   p50 / p95 latency of a request; every answer is checked whole and in input order against what the same server
   gives each text alone (`lost`: texts missing or answered out of place).

    python benchmarks/libretranslate_vs.py --libre_python /tmp/libre/bin/python \\
        --model runs/spm-en-fr --reverse_model runs/spm-fr-en [--texts 512] [--clients 32] [--rounds 2]

The models are aayn folders with a SentencePiece tokenizer (Argos packages need one), both directions (LibreTranslate
1.9 fetches the package index at start with fewer than two packages installed). LibreTranslate runs from a venv of
its own (tests/scripts/libretranslate_offline.py: how, and why each text is kept whole offline); `aayn serve` serves
the same folders (`--pair`), torch on the CPU, and their CTranslate2 exports (LibreTranslate's engine) as a third arm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scripts"))
from libretranslate_offline import start_libretranslate
from serve_load import start

REQUESTS = [  # (what it is, the body)
    ("one text", {"q": "Jesus wept.", "source": "en", "target": "fr"}),
    ("a list", {"q": ["Jesus wept.", "God is love."], "source": "en", "target": "fr"}),
    ("source auto", {"q": ["God is love."], "source": "auto", "target": "fr"}),
    ("alternatives 2", {"q": "God is love.", "source": "en", "target": "fr", "alternatives": 2}),
    ("format html", {"q": "<p>God is <b>love</b>.</p>", "source": "en", "target": "fr", "format": "html"}),
    ("the other pair", {"q": "Dieu est amour.", "source": "fr", "target": "en"}),
    ("missing q", {"source": "en", "target": "fr"}),
    ("missing target", {"q": "x", "source": "en"}),
    ("unsupported source", {"q": "x", "source": "de", "target": "fr"}),
    ("unsupported target", {"q": "x", "source": "en", "target": "de"}),
    ("format xml", {"q": "x", "source": "en", "target": "fr", "format": "xml"}),
    ("alternatives x", {"q": "x", "source": "en", "target": "fr", "alternatives": "x"}),
    ("too long", {"q": "x" * 3000, "source": "en", "target": "fr"}),
]


def post(url: str, body) -> tuple[int, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url + "/translate", data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def shapes(servers: dict[str, str]) -> list[dict]:
    rows = []
    for name, body in [*REQUESTS, ("invalid JSON", b"{")]:
        row = {"request": name}
        for arm, url in servers.items():
            status, answer = post(url, body)
            row[arm] = (status, sorted(answer) if isinstance(answer, dict) else type(answer).__name__)
        rows.append(row)
    return rows


async def request(url: str, texts: list[str]) -> tuple[int, list | None, float]:
    """One LibreTranslate-shaped request on a fresh connection (the standard library's asyncio streams)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = json.dumps({"q": texts, "source": "en", "target": "fr"}).encode()
    start = time.perf_counter()
    writer.write(f"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)  # fmt: skip
    status = int((await reader.readline()).split()[1])
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    answer = json.loads(await reader.read())
    writer.close()
    return status, answer.get("translatedText") if status == 200 else None, time.perf_counter() - start


def load(url: str, texts: list[str], expected: dict, clients: int, per_request: int) -> dict:
    lists = [texts[i : i + per_request] for i in range(0, len(texts), per_request)]
    results = []

    async def client():
        while lists:
            sent = lists.pop()
            results.append((sent, *await request(url, sent)))

    async def run():
        await asyncio.gather(*(client() for _ in range(clients)))

    started = time.perf_counter()
    asyncio.run(run())
    wall = time.perf_counter() - started
    answered = [r for r in results if r[1] == 200]
    latencies = sorted(r[3] for r in answered)
    lost = sum(sum(a != expected[t] for t, a in zip(sent, got)) + abs(len(sent) - len(got or []))
               for sent, status, got, _ in answered)  # fmt: skip
    return {
        "texts_per_second": sum(len(r[0]) for r in answered) / wall,
        "p50_s": latencies[len(latencies) // 2],
        "p95_s": latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))],
        "errors": len(results) - len(answered),
        "lost": lost,
        "wall_s": wall,
    }


def start_aayn(pairs: list[str], *flags: str) -> tuple[subprocess.Popen, str]:
    served = [flag for pair in pairs for flag in ("--pair", pair)]
    return start(*served, "--max_chars", "2000", "--max_sentences", "64", *flags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libre_python", required=True)
    parser.add_argument("--model", required=True, help="an en -> fr aayn folder with a SentencePiece tokenizer")
    parser.add_argument("--reverse_model", required=True, help="the fr -> en one")
    parser.add_argument("--texts", type=int, default=512, help="test verses sent in each load run")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--per_request", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", default=tempfile.mkdtemp(prefix="libre-vs-"))
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args()
    from aayn.data import load_translation_dataset
    from aayn.formats import export_model

    work = Path(args.work)
    test = load_translation_dataset("bible", source_lang="en", target_lang="fr", splits={"test": "test"})["test"]
    texts = [row["en"] for row in test["translation"][: args.texts]]
    for folder, name in ((args.model, "ct2-en-fr"), (args.reverse_model, "ct2-fr-en")):
        if not (work / name).exists():
            export_model(folder, work / name)
    libre, libre_url, log = start_libretranslate(
        args.libre_python, [args.model, args.reverse_model], work, True, "--char-limit", "2000", "--batch-limit", "64"
    )
    if libre is None:
        raise SystemExit(1)
    arms = {"libretranslate": (libre, libre_url)}
    arms["aayn serve (torch)"] = start_aayn([f"en:fr={args.model}", f"fr:en={args.reverse_model}"])
    arms["aayn serve (ct2 export)"] = start_aayn([f"en:fr={work / 'ct2-en-fr'}", f"fr:en={work / 'ct2-fr-en'}"],
                                                 "--threads", "1")  # fmt: skip
    try:
        report = {"shapes": shapes({arm: url for arm, (_, url) in arms.items()}), "load": {arm: [] for arm in arms}}
        print("| request | " + " | ".join(arms) + " |\n| --- |" + " --- |" * len(arms))
        for row in report["shapes"]:
            print(f"| {row['request']} | " + " | ".join(f"{row[a][0]} {row[a][1]}" for a in arms) + " |")
        expected = {}
        for arm, (_, url) in arms.items():  # each text alone, on that server: what every batched answer must be
            expected[arm] = {text: post(url, {"q": text, "source": "en", "target": "fr"})[1]["translatedText"]
                             for text in texts}  # fmt: skip
        for _ in range(args.rounds):
            for arm, (_, url) in arms.items():
                report["load"][arm].append(load(url, texts, expected[arm], args.clients, args.per_request))
        print(f"\n{args.clients} clients, lists of {args.per_request} of {len(texts)} test verses, {args.rounds} "
              "rounds alternating (medians):")  # fmt: skip
        print("| server | texts/s | p50 s | p95 s | errors | lost or out of order |")
        print("| --- | --- | --- | --- | --- | --- |")
        for arm, runs in report["load"].items():
            median = lambda key, runs=runs: statistics.median(run[key] for run in runs)
            print(f"| {arm} | {median('texts_per_second'):.1f} | {median('p50_s'):.2f} | {median('p95_s'):.2f} | "
                  f"{sum(r['errors'] for r in runs)} | {sum(r['lost'] for r in runs)} |")  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    finally:
        for process, _ in arms.values():
            process.terminate()
            process.wait(timeout=120)
        log.close()


if __name__ == "__main__":
    main()
