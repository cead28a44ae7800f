"""Hostile input to `aayn serve`, each answered in one line with a status of its own, the server answering a normal
request afterwards: a 10,000-item `q`, deeply nested JSON, invalid UTF-8, a 50 MB body, an HTML bomb, a zip bomb in
a .docx, `../` in a download name, and a client that sends its body one byte at a time while others are served.
The server runs in a subprocess, asked over real HTTP and raw sockets."""

import io
import json
import os
import signal
import socket
import threading
import time
import zipfile

import pytest
from server_helpers import Server

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def server(saved):
    running = Server(None, "--pair", f"en:fr={saved[0]}", "--max_wait_ms", 5, "--workers", 2)
    yield running
    assert running.stop()[0] == 0


def raw_post(server, path: str, body: bytes, content_type: str = "application/json", length: int | None = None):
    """(status, body) of a POST sent over a socket as written (`length`: the Content-Length it declares)."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n")  # fmt: skip
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as connection:
        connection.sendall(head.encode())
        try:
            connection.sendall(body)
        except (BrokenPipeError, ConnectionResetError):  # the server answered before reading it all
            pass
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1]


def one_line(data: bytes) -> str:
    message = json.loads(data)["error"]
    assert len(message.splitlines()) == 1 and len(message) < 500, message
    return message


def test_hostile_inputs_each_get_a_status_and_a_line_and_the_server_goes_on(server):
    """Each input with the status and message it gets (docs/measurements.md lists them)."""
    cases = [
        ("a 10,000-item q", "/translate", json.dumps({"q": ["Two."] * 10_000, "source": "en", "target": "fr"}).encode(),
         "application/json", 400, "exceeds text limit"),
        ("JSON nested 100,000 deep", "/translate", b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
         "application/json", 400, "the body is not JSON"),  # not JSON: no shape to read it by
        ("invalid UTF-8 (JSON)", "/translate", b'{"q": "\xff\xfe", "source": "en", "target": "fr"}',
         "application/json", 400, "the body is not JSON"),
        ("nested JSON to /detect", "/detect", b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
         "application/json", 400, "Invalid JSON format"),
        ("invalid UTF-8 (form)", "/translate", b"q=\xff\xfe&source=en&target=fr", "application/x-www-form-urlencoded",
         400, "not UTF-8"),
        ("invalid UTF-8 escaped in a form (read as U+FFFD, as werkzeug reads it: no letters, given back)",
         "/translate", b"q=%FF%FE&source=en&target=fr", "application/x-www-form-urlencoded", 200, "\ufffd"),
        ("an HTML bomb: 600 nested elements", "/translate",
         json.dumps({"q": "<b>" * 600 + "Two." + "</b>" * 600, "source": "en", "target": "fr",
                     "format": "html"}).encode(), "application/json", 400, "exceeds text limit"),
        ("an HTML bomb within the limit: 280 nested elements", "/translate",
         json.dumps({"q": "<b>" * 280 + "Two." + "</b>" * 280, "source": "en", "target": "fr",
                     "format": "html"}).encode(), "application/json", 200, None),
        ("a zip bomb in a .docx", "/translate_file", None, None, 400, "a zip bomb"),
        ("nested JSON for the Hub's shape", "/translate", b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
         "application/json", 400, "the body is not JSON"),
    ]  # fmt: skip
    results = []
    for what, path, body, content_type, status, message in cases:
        if body is None:
            body, content_type = zip_bomb_form()
        started = time.perf_counter()
        got, data = raw_post(server, path, body, content_type)
        seconds = time.perf_counter() - started
        said = one_line(data) if got != 200 else json.loads(data)["translatedText"][:40]
        results.append((what, got, said, round(seconds, 2)))
        assert got == status and (message is None or message in said), (what, got, data[:300])
        assert seconds < 30, (what, seconds)
    got, data = raw_post(server, "/translate", b"x" * 1024, length=50 * 1024 * 1024)  # declares 50 MB
    assert got == 413 and "at most" in one_line(data)
    for name in ("../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "%2e%2e%2fsecret.txt"):
        request = f"GET /download_file/{name} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
            connection.sendall(request)
            answer = connection.recv(65536)
        assert answer.split(b" ", 2)[1] in (b"400", b"404") and b"root:" not in answer, name
    assert server.post({"q": "Two.", "source": "en", "target": "fr"})[0] == 200
    print(json.dumps(results, indent=1))


def zip_bomb_form() -> tuple[bytes, str]:
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * (64 * 1024 * 1024))
    boundary = "bomb"
    part = f'--{boundary}\r\nContent-Disposition: form-data; name="{{}}"{{}}\r\n\r\n'
    body = part.format("file", '; filename="bomb.docx"').encode() + bomb.getvalue() + b"\r\n"
    body += (part.format("source", "") + "en\r\n" + part.format("target", "") + f"fr\r\n--{boundary}--\r\n").encode()
    return body, f"multipart/form-data; boundary={boundary}"


def test_a_client_sending_a_byte_at_a_time_holds_no_one_else(server):
    """A client that trickles its body (one byte every 0.2 s) keeps its own connection only: other clients are
    answered meanwhile, and its request is answered when its body is complete."""
    body = json.dumps({"q": "Two.", "source": "en", "target": "fr"}).encode()
    outcome = {}

    def trickle():
        head = (f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                "\r\nConnection: close\r\n\r\n")  # fmt: skip
        with socket.create_connection(("127.0.0.1", server.port), timeout=120) as connection:
            connection.sendall(head.encode())
            for byte in body:
                connection.sendall(bytes([byte]))
                time.sleep(0.2)
            outcome["answer"] = connection.recv(65536)

    slow = threading.Thread(target=trickle)
    slow.start()
    time.sleep(0.5)
    started = time.perf_counter()
    for _ in range(3):
        assert server.post({"q": "Two.", "source": "en", "target": "fr"})[0] == 200
    assert time.perf_counter() - started < 5 and slow.is_alive()  # answered while the slow body still trickles
    slow.join(60)
    assert outcome["answer"].split(b" ", 2)[1] == b"200"


GOOD = ["Six one eight.", "Two.", "Zero nine nine five three four.", "One.", "Seven seven.", "Three two one."]
# texts a client may send: lone surrogates (valid JSON escapes, refused in one line), NUL and other control
# characters, texts that tokenize to nothing, a text at the character limit of one repeated character (translated)
REFUSED = ["a\ud800b", "\udfff", "Two.\udcff"]
TRANSLATED = ["a\x00b", "\x00", "\x01\x02\x1b[31mred\x1b[0m", "\x7f\x85\u2028\x0c", "\u200b\u200b", "\ufeff", "\ufffe",
              " \t ", "e" * 2000]  # fmt: skip
# bodies with invalid escapes: not JSON
INVALID = [b'{"q": "a\\x41", "source": "en", "target": "fr"}', b'{"q": "\\ud800\\u12", "source": "en", "target": "fr"}',
           b'{"inputs": "\\q"}']  # fmt: skip


def test_hostile_texts_among_concurrent_clients_fail_only_their_own_requests(server, saved):
    """Good requests of both shapes and hostile ones from 16 concurrent clients, batched together by the server
    (two worker processes, one of them killed mid-run): each good answer is what the same request gets alone, each
    hostile text is refused in one line naming it or translated, no request is left waiting, and the server goes
    on."""
    from concurrent.futures import ThreadPoolExecutor

    from aayn.translation.opening import open_translator

    translator = open_translator([str(saved[0])])
    alone = {text: translator.translate([text])[0] for text in GOOD}
    libre_alone = {text: server.post({"q": text, "source": "en", "target": "fr"})[1]["translatedText"] for text in GOOD}
    requests = []
    for i in range(72):
        good = [GOOD[(i + j) % len(GOOD)] for j in range(1 + i % 3)]
        if i % 4 == 0:
            requests.append(("refused", i, good[:1] + [REFUSED[i % len(REFUSED)]] + good[1:]))
        elif i % 4 == 1:
            requests.append(("translated", i, [TRANSLATED[i % len(TRANSLATED)]] + good))
        elif i % 8 == 2:
            requests.append(("invalid", i, INVALID[i % len(INVALID)]))
        else:
            requests.append(("good", i, good))

    def hub(i: int) -> bool:  # the Hub's shape, else LibreTranslate's: each kind in both
        return (i // 4 + i) % 2 == 1

    def ask(request):
        kind, i, texts = request
        if kind == "invalid":
            status, answer = raw_post(server, "/translate", texts)
        elif hub(i):
            status, answer, _ = server.post({"inputs": texts})
        else:
            status, answer, _ = server.post({"q": texts, "source": "en", "target": "fr"})
        answered.append(time.perf_counter())
        return status, answer

    pids, answered = server.get("/health")["worker_pids"], []
    with ThreadPoolExecutor(16) as pool:
        answers = pool.map(ask, requests)
        time.sleep(0.3)
        os.kill(pids[0], signal.SIGKILL)  # a worker process dies while the clients are being answered
        killed = time.perf_counter()
        answers = list(answers)
    assert 0 < sum(when < killed for when in answered) < len(requests)  # killed mid-run
    for (kind, i, texts), (status, answer) in zip(requests, answers):
        if kind == "invalid":
            assert status == 400 and "JSON" in one_line(answer), (texts, answer)
        elif kind == "refused":
            message = answer["error"]
            assert status == 400 and "lone surrogate" in message and "\n" not in message, (texts, answer)
            assert f"[{1}] holds a lone surrogate" in message, message  # the text named by its place
        else:
            assert status == 200, (texts, answer)
            got = [a["translation_text"] for a in answer] if hub(i) else answer["translatedText"]
            good = texts[1:] if kind == "translated" else texts
            expected = [alone[text] for text in good] if hub(i) else [libre_alone[text] for text in good]
            assert got[len(texts) - len(good) :] == expected, (texts, got)
            assert all(isinstance(text, str) for text in got)
    health = server.get("/health")
    assert health["status"] == "ok" and health["waiting"] == 0 and pids[0] not in health["worker_pids"]
    assert health["batches"] < len(requests)  # requests were decoded together
