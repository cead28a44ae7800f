"""`aayn serve`: the server runs in a subprocess on a free port and is asked over real HTTP (urllib, raw sockets):
concurrent requests decode as each sentence alone would through the same translator, bad requests are named in one
line and the server goes on, a full queue answers 503, a client that leaves costs only its own sentences, SIGTERM
answers what is in flight and exits 0, in the server's thread and with worker processes (one killed mid-batch
fails that batch only). The worker's survival of a model error, how long a batch waits for the clients just
answered, and how batches are shared out among worker threads are checked on the Batcher itself."""

import asyncio
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from server_helpers import Server

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

SENTENCES = ["Six one eight.", "Two.", "Zero nine nine five three four.", "One.", "Seven seven.", "Three two one."]


@pytest.fixture(scope="module")
def alone(saved):
    """Each sentence translated alone through the translator `aayn translate` uses, with the options tested."""
    from aayn.translation.opening import open_translator

    translator = open_translator([str(saved[0])])
    return {
        (text, beams): translator.nbest([text], 2 if beams == 2 else 1, **({"num_beams": beams} if beams else {}))[0]
        for text in SENTENCES
        for beams in (None, 1, 2)
    }


# what build_app routes (serve/app.py), each described by /openapi.json
ROUTES = {"/", "/translate", "/languages", "/detect", "/frontend/settings", "/health", "/openapi.json", "/spec",
          "/translate_file", "/download_file/{filename}", "/suggest"}  # fmt: skip


def test_every_route_of_the_app_is_described_with_its_methods():
    """The OpenAPI document against the application's own routing table (no server started): every path with
    every method it answers, each POST with its request body, both request shapes of /translate in every encoding
    LibreTranslate reads."""
    pytest.importorskip("starlette")
    from aayn.formats.translator import Translator
    from aayn.serve import Pair, ServeSettings, build_app, openapi

    pytest.importorskip("prometheus_client")
    with_metrics = build_app([Pair("en", "fr", ["toy"], [Translator()])], ServeSettings(metrics=True))
    assert {route.path for route in with_metrics.routes} == set(openapi(metrics=True)["paths"]) == ROUTES | {"/metrics"}
    app = build_app([Pair("en", "fr", ["toy"], [Translator()])], ServeSettings())
    routed = {route.path: {m.lower() for m in route.methods} - {"head"} for route in app.routes}
    described = openapi()["paths"]
    assert set(routed) == set(described) == ROUTES
    for path, methods in routed.items():
        assert set(described[path]) == methods, path
        for method in methods - {"get"}:
            assert described[path][method]["requestBody"]["content"], (path, method)
    content = described["/translate"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "application/x-www-form-urlencoded", "multipart/form-data"}
    assert set(described["/detect"]["post"]["requestBody"]["content"]) == set(content)


@pytest.mark.parametrize("workers", [1, 2])
def test_concurrent_requests_translate_as_each_sentence_alone(saved, alone, workers):
    """In the server's own thread, and in two worker processes decoding batches side by side."""
    server = Server(saved[0], "--max_wait_ms", "20", "--workers", str(workers))
    try:
        health = server.get("/health")
        assert health["status"] == "ok" and health["model"]["type"] == "aayn" and health["model"]["parameters"] > 0
        assert health["workers"] == workers and len(health.get("worker_pids", [])) == (workers if workers > 1 else 0)
        assert [health["model"][key] for key in ("device", "dtype", "cuda_graphs")] == ["cpu", "float32", False]
        described = server.get("/openapi.json")["paths"]
        assert set(described) == ROUTES  # every endpoint, and POST /translate in both request shapes
        shapes = described["/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
        assert [shape["required"] for shape in shapes] == [["inputs"], ["q", "source", "target"]]

        def ask(i: int):
            texts = [SENTENCES[(i + j) % len(SENTENCES)] for j in range(1 + i % 3)]
            beams = (None, 1, 2)[i % 3]
            parameters = {} if beams is None else {"num_beams": beams}
            if beams == 2:
                parameters["num_return_sequences"] = 2
            return texts, beams, server.post({"inputs": texts if i % 4 else texts[0], "parameters": parameters})

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(ask, range(48)))
        for i, (texts, beams, (status, body, _)) in enumerate(answers):
            assert status == 200, body
            texts = texts if i % 4 else texts[:1]
            assert len(body) == len(texts)
            for text, answer in zip(texts, body):
                expected = alone[text, beams]
                if beams == 2:  # two hypotheses, each with its score
                    assert [a["translation_text"] for a in answer] == [t for _, t in expected]
                    assert [a["score"] for a in answer] == pytest.approx([s for s, _ in expected], rel=1e-5)
                else:
                    assert answer == {"translation_text": expected[0][1]}
        assert server.get("/health")["batches"] < 48  # requests were decoded together
    finally:
        code, stderr = server.stop()
    assert code == 0, stderr[-3000:]


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"{not json", 400, "the body is not JSON"),
        ({"text": "One."}, 400, '"inputs"'),
        ({"inputs": "One.", "parameters": {"temperature": 0.7}}, 400, "unknown parameter 'temperature'"),
        (
            {"inputs": "One.", "parameters": {"num_beams": 0}},
            400,
            "parameter num_beams must be an integer from 1 to 16",
        ),
        (
            {"inputs": "One.", "parameters": {"num_beams": 1000}},
            400,
            "parameter num_beams must be an integer from 1 to 16",
        ),
        ({"inputs": "One.", "parameters": {"num_beams": 1, "num_return_sequences": 2}}, 400, "exceeds num_beams"),
        ({"inputs": [1, 2]}, 400, "a text or a list of texts"),
        ({"inputs": ["One."] * 5}, 422, "at most 4 a request"),
        ({"inputs": "x" * 41}, 422, "at most 40 (--char_limit)"),
    ],
)
def test_bad_requests_are_named_in_one_line_and_the_server_goes_on(bad_request_server, body, status, message):
    got, answer, _ = bad_request_server.post(body, raw=isinstance(body, bytes))
    assert got == status and message in answer["error"] and "\n" not in answer["error"]
    assert bad_request_server.post({"inputs": "One."})[0] == 200


@pytest.fixture(scope="module")
def bad_request_server(saved):
    server = Server(saved[0], "--max_sentences", "4", "--max_chars", "40")
    yield server
    assert server.stop()[0] == 0


def test_a_full_queue_answers_503_and_a_client_that_leaves_costs_only_its_sentences(saved):
    server = Server(saved[0], "--max_queue", "3", "--max_wait_ms", "1500")
    try:
        first = ThreadPoolExecutor(1).submit(server.post, {"inputs": SENTENCES[:2]})  # waits 1.5 s for company
        time.sleep(0.3)
        status, answer, headers = server.post({"inputs": SENTENCES[2:4]})  # 2 + 2 > 3
        assert status == 503 and "queue is full" in answer["error"] and headers["retry-after"] == "1"
        assert first.result()[0] == 200
        # a client sends 2 sentences and leaves; a third sentence from another arrives within the wait
        body = json.dumps({"inputs": SENTENCES[:2]}).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as leaving:
            leaving.sendall(
                b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            time.sleep(0.3)
        before = server.get("/health")["sentences"]
        assert server.post({"inputs": SENTENCES[4]})[0] == 200
        assert server.get("/health")["sentences"] - before == 1  # the leaver's two were never decoded
    finally:
        code, stderr = server.stop()
    assert code == 0, stderr[-3000:]


def test_worker_processes_open_the_model_in_the_dtype_asked(saved):
    """`aayn serve --workers 2 --dtype bfloat16`: each worker process casts the weights (/health says so), and a
    sentence's two best are transformers' own `from_pretrained(dtype=torch.bfloat16)` model's, scores included."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(saved[0])
    model = AutoModelForSeq2SeqLM.from_pretrained(saved[0], dtype=torch.bfloat16).eval()
    server = Server(saved[0], "--max_wait_ms", "1", "--workers", "2", "--dtype", "bfloat16")
    try:
        assert server.get("/health")["model"]["dtype"] == "bfloat16"
        for text in SENTENCES[:3]:  # one at a time: each decoded alone, as the reference is
            status, body, _ = server.post({"inputs": text, "parameters": {"num_beams": 2, "num_return_sequences": 2}})
            assert status == 200, body
            answer = body[0]  # the sentence's two hypotheses
            found = model.generate(**tokenizer([text], return_tensors="pt"), num_beams=2, num_return_sequences=2,
                                   return_dict_in_generate=True, output_scores=True)  # fmt: skip
            texts = [t.strip() for t in tokenizer.batch_decode(found.sequences, skip_special_tokens=True)]
            assert [a["translation_text"] for a in answer] == texts
            assert [a["score"] for a in answer] == pytest.approx(found.sequences_scores.tolist(), abs=1e-5)
    finally:
        code, stderr = server.stop()
    assert code == 0, stderr[-3000:]


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_answers_the_requests_in_flight_then_exits_0(saved, workers):
    server = Server(saved[0], "--max_wait_ms", "1500", "--workers", str(workers))
    pids = server.get("/health").get("worker_pids", [])
    in_flight = ThreadPoolExecutor(1).submit(server.post, {"inputs": SENTENCES})
    time.sleep(0.5)  # the request waits in the queue
    code, stderr = server.stop()
    assert in_flight.result()[0] == 200 and len(in_flight.result()[1]) == len(SENTENCES)
    assert code == 0, stderr[-3000:]
    for pid in pids:  # the worker processes ended with the server
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_process_killed_mid_batch_is_started_again_and_the_batch_retried(saved, alone):
    """A worker process that dies mid-batch (killed here as soon as the batch is sent): the call fails with a line
    naming the process, and the next call goes to a new process, translated as alone; killed under the server's
    batcher, the batch's requests are answered from the new process as alone."""
    from aayn.serve import Batcher, Job, ServeSettings, WorkerTranslator
    from aayn.serve.batcher import WorkerDied

    worker = WorkerTranslator([str(saved[0])], "cpu", threads=1)

    def kill_after_sending():
        """The worker's connection, killing its process once, right after the next message is sent to it (only
        while that process is alive and not yet reaped: its pid cannot be another process's)."""
        process, connection = worker.process, worker.connection

        class KillAfterSending:
            def send(self, message):
                connection.send(message)
                if process.is_alive():
                    os.kill(process.pid, signal.SIGKILL)

            def __getattr__(self, name):
                return getattr(connection, name)

        worker.connection = KillAfterSending()
        return process.pid

    try:
        worker.ready()
        first = kill_after_sending()
        with pytest.raises(WorkerDied, match=f"the worker process {first} ended .*started again"):
            worker.nbest(SENTENCES[:2], 1, num_beams=1)
        assert_as_alone(worker.nbest(SENTENCES[:2], 1, num_beams=1), [alone[text, 1] for text in SENTENCES[:2]])
        second = kill_after_sending()  # the new process, killed under a batch of the server's batcher: retried
        assert second != first
        batcher = Batcher(worker, ServeSettings(max_wait_ms=200))
        batcher.start()
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        jobs = [Job(SENTENCES[i : i + 2], {"num_beams": 1}, loop, loop.create_future()) for i in (0, 2)]
        for job in jobs:
            batcher.submit(job)
        for job in jobs:
            answer = asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(job.answer), 120), loop).result()
            assert_as_alone(answer, [alone[text, 1] for text in job.texts])
        loop.call_soon_threadsafe(loop.stop)
        assert worker.process.pid not in (first, second) and batcher.waiting == 0
        with pytest.raises(RuntimeError, match="token ids must lie in"):  # the worker's error: its line; it goes on
            worker.decode_batch([[10**6, 2]], worker.settings(), None)
        assert_as_alone(worker.nbest(SENTENCES[:1], 2, num_beams=2), [alone[SENTENCES[0], 2]])
    finally:
        worker.close()
    assert not worker.process.is_alive()


def assert_as_alone(answers, expected) -> None:
    """The same texts, and scores within float rounding (the worker runs on one thread, the test on more)."""
    assert [[text for _, text in hypotheses] for hypotheses in answers] == [[t for _, t in e] for e in expected]
    scores = [score for hypotheses in answers for score, _ in hypotheses]
    assert scores == pytest.approx([score for e in expected for score, _ in e], rel=1e-5)


def test_a_model_that_cannot_be_opened_is_named_in_worker_processes_as_in_the_server(tmp_path):
    """`--workers 2` on a folder that holds no model: the line and exit code of the server's own thread."""
    said = []
    for workers in ("1", "2"):
        command = [sys.executable, "-m", "aayn.cli", "serve", "--model", str(tmp_path), "--workers", workers]
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
        said.append((result.returncode, result.stderr.splitlines()[0]))
    assert said[0] == said[1] and said[0][0] == 2 and str(tmp_path) in said[0][1], said


def test_a_model_error_answers_500_in_one_line_and_the_server_goes_on(saved, tmp_path, monkeypatch):
    """A CTranslate2 export whose position table is too short for a long source (as exports made before it held
    source + 50 positions): that request fails in the model, the next one is answered."""
    pytest.importorskip("ctranslate2")
    from aayn.formats import export_model
    from aayn.formats.ctranslate2 import writer

    monkeypatch.setattr(writer, "EXTRA_TARGET_TOKENS", -1)
    folder = export_model(saved[0], tmp_path / "old")
    server = Server(folder, "--max_wait_ms", "1")
    try:
        assert server.get("/health")["model"]["type"] == "ctranslate2"
        status, answer, _ = server.post({"inputs": "twenty five " * 20, "parameters": {"num_beams": 1}})
        assert status == 500 and answer["error"].startswith("the model failed: ") and "\n" not in answer["error"]
        assert server.post({"inputs": "One.", "parameters": {"num_beams": 1}})[0] == 200
    finally:
        code, stderr = server.stop()
    assert code == 0, stderr[-3000:]


def test_a_failing_text_fails_only_its_own_request_in_a_shared_batch_and_a_dead_worker_is_retried():
    """Requests gathered into one batch, one of them holding a text the engine fails on (a tokenizer's or a
    search's error): that request gets the error, each other request the answer it gets alone, and the worker goes
    on. A worker process that dies (once) under a batch: every request of it answered from the new process; one that
    dies under every try: each request answered with that error, none left waiting."""
    from aayn.formats.translator import Translator
    from aayn.serve import Batcher, Job, ServeSettings
    from aayn.serve.batcher import WorkerDied

    calls = []

    class Flaky(Translator):
        deaths = 0  # worker deaths still to come

        def nbest(self, texts, nbest=1, **options):
            calls.append(list(texts))
            if self.deaths:
                self.deaths -= 1
                raise WorkerDied("the worker process 1 ended (exit code -9)")
            if any("boom" in text for text in texts):
                raise RuntimeError("TextEncodeInput must be Union[...]\nfrom the tokenizer")
            return [[(0.0, text.upper())] for text in texts]

    flaky = Flaky()
    batcher = Batcher(flaky, ServeSettings(max_wait_ms=300))
    batcher.start()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def together(requests: list[list[str]]) -> list:
        """Each request's answer (or its error), the requests sent at once so that they share a batch."""

        async def ask(texts):
            job = Job(texts, {}, loop, loop.create_future())
            batcher.submit(job)
            try:
                return await asyncio.wait_for(job.answer, 30)
            except Exception as error:  # noqa: BLE001  the request's own answer
                return error

        async def all_of():
            return await asyncio.gather(*(ask(texts) for texts in requests))

        calls.clear()
        return asyncio.run_coroutine_threadsafe(all_of(), loop).result()

    def alone(texts):
        return [[(0.0, text.upper())] for text in texts]

    try:
        requests = [["a", "b"], ["c"], ["d boom"], ["e", "f"], ["g"], ["h boom", "i"]]
        answers = together(requests)
        assert sorted(calls[0]) == sorted(text for texts in requests for text in texts)  # one batch, then halves
        for texts, answer in zip(requests, answers):
            if any("boom" in text for text in texts):
                assert isinstance(answer, RuntimeError) and "TextEncodeInput" in str(answer)
            else:
                assert answer == alone(texts)
        assert batcher.waiting == 0 and len(calls) <= 2 * len(requests) - 1
        flaky.deaths = 1
        requests = [["a"], ["b", "c"], ["d"]]
        assert together(requests) == [alone(texts) for texts in requests]  # retried on the new process
        flaky.deaths = 10**6
        answers = together(requests)
        assert all(isinstance(answer, WorkerDied) for answer in answers)
        assert len(calls) == 1 + 1 + 3 * 2  # the batch, its half of two, each request alone twice
        flaky.deaths = 0
        assert together([["j"]]) == [alone(["j"])] and batcher.waiting == 0
    finally:
        batcher.stop()
        loop.call_soon_threadsafe(loop.stop)


def test_a_batch_waits_for_the_clients_just_answered_and_no_longer():
    """After a model call, the next batch waits (at most max_wait_ms) for the clients that call answered; once
    they are all back it goes at once, and a client that does not come back is waited for until max_wait_ms."""
    from aayn.formats.translator import Translator
    from aayn.serve import Batcher, Job, ServeSettings

    calls = []

    class Recording(Translator):
        def nbest(self, texts, nbest=1, **options):
            calls.append((time.perf_counter(), list(texts)))
            return [[(0.0, text.upper())] for text in texts]

    class SlowToCount(queue.Queue):  # the queue counted slowly: answered clients send again meanwhile (CI's race)
        def qsize(self):
            time.sleep(0.3)
            return super().qsize()

    wait = 2.0
    batcher = Batcher(Recording(), ServeSettings(max_wait_ms=wait * 1000))
    batcher.jobs = SlowToCount()
    batcher.start()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def send(texts):  # one request per text at once, as many clients; returns when all are answered
        async def ask(text):
            job = Job([text], {}, loop, loop.create_future())
            batcher.submit(job)
            return await asyncio.wait_for(job.answer, 30)

        async def all_of():
            return await asyncio.gather(*(ask(text) for text in texts))

        started = time.perf_counter()
        answers = asyncio.run_coroutine_threadsafe(all_of(), loop).result()
        assert answers == [[[(0.0, text.upper())]] for text in texts]
        return calls[-1][0] - started

    try:
        assert send(["a", "b", "c"]) >= wait * 0.9  # no call answered yet: the first batch waits max_wait_ms
        assert send(["d", "e", "f"]) < wait / 2  # the three clients answered are back: no more waiting
        assert send(["g", "h"]) >= wait * 0.9  # one of them did not come back: waited for until max_wait_ms
        assert [sorted(texts) for _, texts in calls] == [["a", "b", "c"], ["d", "e", "f"], ["g", "h"]]
    finally:
        batcher.stop()
        loop.call_soon_threadsafe(loop.stop)


def test_a_batch_is_shared_out_among_idle_worker_threads():
    """With two translators (worker processes), the batch one thread gathers is split between it and the idle
    one, by characters, and both halves decode at the same time; idle threads do not split the arrivals among
    themselves while one gathers."""
    from aayn.formats.translator import Translator
    from aayn.serve import Batcher, Job, ServeSettings

    calls = []

    class Slow(Translator):
        def nbest(self, texts, nbest=1, **options):
            started = time.perf_counter()
            time.sleep(0.5)
            calls.append((id(self), started, time.perf_counter(), sorted(texts)))
            return [[(0.0, text.upper())] for text in texts]

    batcher = Batcher([Slow(), Slow()], ServeSettings(max_wait_ms=300))
    batcher.start()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def ask(text):
        job = Job([text], {}, loop, loop.create_future())
        batcher.submit(job)
        return await asyncio.wait_for(job.answer, 30)

    async def all_of(texts):
        return await asyncio.gather(*(ask(text) for text in texts))

    try:
        texts = ["a" * n for n in (1, 2, 3, 4, 5, 6, 7, 8)]
        answers = asyncio.run_coroutine_threadsafe(all_of(texts), loop).result()
        assert answers == [[[(0.0, text.upper())]] for text in texts]
        assert len(calls) == 2 and calls[0][0] != calls[1][0]  # one call on each translator
        assert sorted(len(c[3]) for c in calls) == [4, 4]  # 18 and 18 characters
        assert max(c[1] for c in calls) < min(c[2] for c in calls)  # side by side
        assert sorted(calls[0][3] + calls[1][3]) == sorted(texts) and batcher.waiting == 0
    finally:
        batcher.stop()
        loop.call_soon_threadsafe(loop.stop)


def test_while_the_other_threads_are_busy_a_batch_takes_its_share_only():
    """Worker threads' batches even out: while one decodes a long call, a batch gathered by another takes its share
    of the sentences in flight (4 of 1 + 6), and leaves the rest for the next thread free."""
    from aayn.formats.translator import Translator
    from aayn.serve import Batcher, Job, ServeSettings

    calls = []

    class Slow(Translator):
        def nbest(self, texts, nbest=1, **options):
            time.sleep(1.5 if "slow" in texts else 0.3)
            calls.append(sorted(texts))
            return [[(0.0, text.upper())] for text in texts]

    batcher = Batcher([Slow(), Slow()], ServeSettings(max_wait_ms=200))
    batcher.start()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def send(texts):  # all submitted before any is gathered (the batcher threads wait for the GIL)
        jobs = [Job([text], {}, loop, loop.create_future()) for text in texts]
        for job in jobs:
            batcher.submit(job)
        return await asyncio.wait_for(asyncio.gather(*(job.answer for job in jobs)), 30)

    try:
        slow = asyncio.run_coroutine_threadsafe(send(["slow"]), loop)
        time.sleep(0.6)  # one thread decodes "slow" (gathered for max_wait_ms, alone)
        texts = list("abcdef")
        assert asyncio.run_coroutine_threadsafe(send(texts), loop).result() == [[[(0.0, t.upper())]] for t in texts]
        assert slow.result() == [[[(0.0, "SLOW")]]]
        assert [len(call) for call in calls] == [4, 2, 1] and sorted(calls[0] + calls[1]) == texts
    finally:
        batcher.stop()
        loop.call_soon_threadsafe(loop.stop)


def test_the_server_process_imports_no_torch_for_an_export_or_with_worker_processes(saved, tmp_path):
    """`aayn serve` of a CTranslate2 export, and the server process of `--workers 2` (whose workers hold the
    model), import neither torch nor transformers."""
    pytest.importorskip("ctranslate2")
    from aayn.formats import export_model

    exported = export_model(saved[0], tmp_path / "ct2")
    code = f"""
import sys
import types
import aayn.serve
def serve(pairs, settings, host, port, api_keys=None):  # the app built, not run
    aayn.serve.build_app(pairs, settings, api_keys)
    print("torch" in sys.modules, "transformers" in sys.modules)
aayn.serve.serve = serve
aayn.serve.start_workers = lambda *args: [types.SimpleNamespace(description={{"type": "aayn"}})]
from aayn.cli import main
main(["serve", "--model", {str(exported)!r}])
main(["serve", "--model", {str(saved[0])!r}, "--workers", "2"])
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.stdout.split() == ["False"] * 4, result.stdout + result.stderr[-3000:]


def test_threads_reach_each_engine(saved, tmp_path, monkeypatch):
    """`aayn serve --threads N`: CTranslate2's intra_threads for an export, torch's thread count for an aayn folder."""
    import torch

    from aayn.formats import export_model
    from aayn.translation.opening import open_translator

    ctranslate2 = pytest.importorskip("ctranslate2")
    exported = export_model(saved[0], tmp_path / "ct2")
    options, engine = {}, ctranslate2.Translator
    monkeypatch.setattr(
        ctranslate2, "Translator", lambda *args, **kwargs: options.update(kwargs) or engine(*args, **kwargs)
    )
    open_translator([str(exported)], threads=1)
    assert options["intra_threads"] == 1
    before = torch.get_num_threads()
    try:
        open_translator([str(saved[0])], threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_threads_must_be_positive(saved, capsys):
    from aayn.cli import main

    with pytest.raises(SystemExit) as exit:
        main(["serve", "--model", str(saved[0]), "--threads", "0"])
    assert exit.value.code == 2
    assert "argument --threads: must be a positive integer, got 0" in capsys.readouterr().err


def test_an_onnx_export_serves_as_its_torch_folder_translates(saved, alone, tmp_path, onnx_graphs_once):
    """`aayn serve` of an ONNX folder (`aayn export --format onnx`) in worker processes (the engine in a process of
    its own; in the server's thread it is the engine `aayn translate` runs, tests/test_onnx_export.py): the same
    answers as the torch folder's translator gives each sentence alone, its kind in /health."""
    workers = 2
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from aayn.formats import export_model

    exported = export_model(saved[0], tmp_path / "onnx", format="onnx")
    server = Server(exported, "--workers", str(workers))
    try:
        assert server.get("/health")["model"]["type"] == "onnx"
        status, answer, _ = server.post({"inputs": SENTENCES, "parameters": {"num_beams": 1}})
        assert status == 200
        assert [item["translation_text"] for item in answer] == [alone[text, 1][0][1] for text in SENTENCES]
        two = {"num_beams": 2, "num_return_sequences": 2}
        status, answer, _ = server.post({"inputs": SENTENCES[:2], "parameters": two})
        assert status == 200
        assert_as_alone([[(item["score"], item["translation_text"]) for item in hypotheses] for hypotheses in answer],
                        [alone[text, 2] for text in SENTENCES[:2]])  # fmt: skip
    finally:
        assert server.stop()[0] == 0
