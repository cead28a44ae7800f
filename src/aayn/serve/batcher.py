"""The batching behind `aayn serve`: sentences of concurrent requests wait at most `max_wait_ms` in a bounded
queue, then one worker thread (the event loop never runs the model) translates those with the same parameters
together through the same `Translator` as `aayn translate` (`aayn.formats.translator`): sorted by length, one model
call per batch of at most `batch_tokens`. A call that fails is made again on each half of its requests, down to the
request that fails alone: one client's text fails only its own request, and the worker goes on. With `workers` above 1,
each of that many threads hands its batches to its own process holding the model (`WorkerTranslator`, `threads`
CPU threads each), and batches decode side by side: the batches a few dozen clients make are small, and a small
batch keeps one thread busier than it keeps two, so two one-thread processes translate two such batches faster than
one two-thread process translates both as one. A worker process that dies is started again and its batch tried
again there; a request whose process dies twice answers 503."""

from __future__ import annotations

import asyncio
import json
import math
import queue
import threading
import time
from dataclasses import dataclass, field

from ..formats.translator import AS_SAVED, DecodingSettings, EngineOptions, TextError, Translator
from .settings import QueueFull, ServeSettings


@dataclass
class Job:
    """One request's sentences, waiting for the worker; `answer` is set from the worker thread."""

    texts: list[str]
    options: dict
    loop: asyncio.AbstractEventLoop
    answer: asyncio.Future
    abandoned: bool = False  # the client went away before its sentences were decoded
    queued: float = field(default_factory=time.perf_counter)

    def settle(self, result=None, error: BaseException | None = None) -> None:
        def set_answer():
            if not self.answer.done():
                self.answer.set_exception(error) if error is not None else self.answer.set_result(result)

        self.loop.call_soon_threadsafe(set_answer)


class Batcher:
    """The threads that run the model, one per translator (one, in this process, unless the server has several
    worker processes). One thread at a time gathers a batch: the jobs that arrive within `max_wait_ms` of the first
    one waiting (or of the end of its last model call, where that is later; once the clients that call answered are
    back, only those already queued). Where other threads are idle, the batch is shared out among them, balanced by
    characters; while all others are busy, it stops at its share of the sentences in flight. Each thread
    translates the sentences of its jobs that share their parameters in one `Translator.nbest` call (which sorts
    them by length and cuts batches of `batch_tokens`)."""

    def __init__(self, translators: Translator | list[Translator], settings: ServeSettings):
        self.translators = translators if isinstance(translators, list) else [translators]
        self.settings = settings
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.waiting = 0  # sentences queued or being decoded
        self.lock = threading.Lock()
        # one thread gathers at a time: idle threads waiting on the queue together would split the arrivals among
        # them into ever smaller batches
        self.gathering = threading.Lock()
        self.idle = 0  # threads waiting to gather
        self.shares: list[list[Job]] = []  # parts of a gathered batch, for idle threads to take
        # one thread per translator, and one runs torch in this process: a second thread running it here would start
        # a second OpenMP team, and with more OpenMP threads than cores their workers stop spinning between ops, so
        # every op waits for them to wake (worker processes each have their own team, of `threads` threads)
        self.threads = [
            threading.Thread(target=self._run, args=(translator,), name=f"aayn-serve-batcher-{i}", daemon=True)
            for i, translator in enumerate(self.translators)
        ]
        self.batches = self.sentences = 0  # translator calls made (each of one or more requests), sentences decoded

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        """Translate what is queued, then end the threads (and close the worker processes)."""
        for _ in self.threads:
            self.jobs.put(None)
        for thread in self.threads:
            thread.join()
        for translator in self.translators:
            getattr(translator, "close", lambda: None)()

    def submit(self, job: Job) -> None:
        with self.lock:
            if self.waiting + len(job.texts) > self.settings.max_queue:
                raise QueueFull(
                    f"the queue is full ({self.waiting} sentences waiting, --max_queue {self.settings.max_queue}); "
                    "retry shortly"
                )
            self.waiting += len(job.texts)
        self.jobs.put(job)

    def _run(self, translator: Translator) -> None:
        last_call_end, expected = 0.0, math.inf  # requests the next batch waits for (before any call: max_wait_ms)
        while True:
            with self.lock:
                self.idle += 1
            with self.gathering:
                with self.lock:
                    self.idle -= 1
                if self.shares:  # a part of the batch another thread gathered
                    jobs, stop = self.shares.pop(), False
                else:
                    jobs, stop = self._gather(last_call_end, expected)
                    parts = share_out(jobs, 1 + self.idle)  # those idle now each take a part
                    jobs = parts[0]
                    self.shares.extend(parts[1:])
            groups: dict[str, list[Job]] = {}
            for job in jobs:
                groups.setdefault(json.dumps(job.options, sort_keys=True, default=repr), []).append(job)
            queued = [self._translate(translator, group) for group in groups.values()]
            # counted before any answer went out: a client answered at once may already have sent its next request
            last_call_end, expected = time.perf_counter(), (queued[0] if queued else self.jobs.qsize()) + len(jobs)
            if stop:
                return

    def _gather(self, last_call_end: float, expected: float) -> tuple[list[Job], bool]:
        """The jobs of the next batch, and whether the server stops after it."""
        first = self.jobs.get()
        if first is None:
            return [], True
        # the wait runs from the later of the first job's arrival and the end of this thread's last model call: the
        # clients just answered get to send their next requests into this batch, not the one after. Once those are
        # back (as many requests wait as were queued at the end of that call plus those it answered), it takes what
        # is queued and goes without waiting out the rest
        start = max(first.queued, last_call_end)
        jobs, deadline, sentences = [first], start + self.settings.max_wait_ms / 1000, len(first.texts)
        while not self._has_its_share(sentences) and (left := deadline - time.perf_counter()) > 0:
            try:
                job = self.jobs.get(timeout=left) if len(jobs) < expected else self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
            sentences += len(job.texts)
        return jobs, False

    def _has_its_share(self, sentences: int) -> bool:
        """Whether a batch of `sentences` is this thread's share of those in flight while every other thread is
        busy: the rest wait for the next thread free, so that the threads' batches even out (idle threads get
        their parts of the whole batch instead)."""
        threads = len(self.translators)
        return threads > 1 and self.idle == 0 and sentences >= math.ceil(self.waiting / threads)

    def _translate(self, translator: Translator, jobs: list[Job]) -> int:
        """Decodes `jobs` and answers them; returns the number of requests queued when the call ended."""
        live = [job for job in jobs if not job.abandoned]
        answers = self._answers(translator, live) if live else []
        queued = self.jobs.qsize()
        with self.lock:  # the books before the answers: a client holding its answer sees a queue without its sentences
            self.waiting -= sum(len(job.texts) for job in jobs)
            self.sentences += sum(len(job.texts) for job, _, error in answers if error is None)
        for job, best, error in answers:
            job.settle(best, error)
        return queued

    def _answers(self, translator: Translator, jobs: list[Job], retried: bool = False) -> list[tuple]:
        """(job, its hypotheses, None) or (job, None, the error) for each job: all in one `nbest` call; where that
        call fails, each half of the jobs apart, down to the job alone that fails, so that a text the tokenizer,
        the search or the detokenizer cannot take fails only its own request and the others get what they get
        alone. A job alone whose worker process died is tried once more, on the process started in its place."""
        options = dict(jobs[0].options)
        nbest = options.pop("num_return_sequences", 1)
        try:
            best = translator.nbest([text for job in jobs for text in job.texts], nbest,
                                    batch_tokens=self.settings.batch_tokens, **options)  # fmt: skip
        except Exception as error:  # noqa: BLE001  answered to the requests it belongs to; the worker goes on
            if len(jobs) > 1:
                half = len(jobs) // 2
                return self._answers(translator, jobs[:half]) + self._answers(translator, jobs[half:])
            if isinstance(error, WorkerDied) and not retried:
                return self._answers(translator, jobs, retried=True)
            return [(jobs[0], None, error)]
        with self.lock:
            self.batches += 1
        answers, start = [], 0
        for job in jobs:
            answers.append((job, best[start : start + len(job.texts)], None))
            start += len(job.texts)
        return answers


class WorkerDied(RuntimeError):
    """A worker process ended while it held a batch (killed, out of memory): its requests are tried again, and a
    request that fails so twice answers 503 (the server goes on with a new process)."""


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


class WorkerTranslator(Translator):
    """An engine in a process of its own (`aayn serve --workers`): `encode` and `decode_batch` send their work
    there and wait for the answer (holding no lock meanwhile, so several such calls run side by side), so the
    batches are cut here by the template as for any engine. The process opens the model folders `names` on
    `device` with `threads` CPU threads, computing as `options` ask (`EngineOptions`). The model's errors raise
    here with their one line; a process that died fails its batch and is started again before the next one.
    `setup`: a picklable callable the process runs first (registering aayn with transformers' Auto classes, say)."""

    def __init__(self, names: list[str], device: str, threads: int, setup=None, options: EngineOptions = AS_SAVED):
        self.names, self.device, self.threads, self.setup = list(names), device, threads, setup
        self.options = options
        self.name = names[0]
        self._spawn()

    def _spawn(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no fork of threads or a torch runtime
        self.connection, child = context.Pipe()
        args = (child, self.names, self.device, self.threads, self.setup, self.options)
        self.process = context.Process(target=_worker, args=args, name="aayn-serve-worker", daemon=True)
        self.process.start()
        child.close()

    def ready(self) -> None:
        """Waits for the process to open the model (then `description` is what /health says of it, and the
        engine's generation config, source limit and abilities are known here), or raises ValueError naming what
        failed."""
        kind, value = self._receive()
        if kind == "error":
            self.close()
            raise ValueError(value)
        self.description, self.generation, self.source_limit, self.abilities = value

    def _receive(self):
        try:
            return self.connection.recv()
        except (EOFError, OSError):
            self.process.join(5)
            raise WorkerDied(
                f"the worker process {self.process.pid} ended (exit code {self.process.exitcode}); "
                "it is started again for the next batch"
            ) from None

    def _call(self, method: str, *args, **kwargs):
        if not self.process.is_alive():
            self.close()
            self._spawn()
            self.ready()
        try:
            self.connection.send((method, args, kwargs))
        except OSError:
            pass  # the process is gone: the receive below says so
        kind, value = self._receive()
        if kind == "error":
            raise RuntimeError(value)
        if kind == "text_error":  # a text of the call no engine takes: the request's fault (400), not the model's
            raise TextError(*value)
        return value

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self._call("encode", list(texts))

    def decode_batch(self, sources: list[list[int]], settings: DecodingSettings, prefixes: list[str] | None, **asked):
        """`asked`: `terms` and `alignment` where given (the engine in the process has those abilities)."""
        return self._call("decode_batch", sources, settings, prefixes, **asked)

    def best_ids(self, sources: list[list[int]], settings: DecodingSettings) -> list[list[int]]:
        return self._call("best_ids", sources, settings)

    def close(self) -> None:
        """Ends the process once it has answered what it was sent."""
        try:
            self.connection.send(None)
        except OSError:
            pass
        self.process.join(60)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


WORKER_METHODS = ("encode", "decode_batch", "best_ids")  # what a worker process answers


def _worker(connection, names: list[str], device: str, threads: int, setup, options: EngineOptions) -> None:
    """A worker process's loop: open the model, then answer `encode` and `decode_batch` calls until told to end or
    the server is gone. It ignores SIGINT and SIGTERM: Ctrl-C or a service manager signals the whole process group,
    and the server answers what is in flight before it closes its workers."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        from ..translation.opening import open_translator

        translator = open_translator(names, device, threads=threads, setup=setup, options=options)
        known = (describe(translator, names), translator.generation, translator.source_limit, translator.abilities)
        connection.send(("ready", known))
    except Exception as error:  # noqa: BLE001  said to the server, which names it and exits
        connection.send(("error", one_line(error)))
        return
    while True:
        try:
            request = connection.recv()
        except EOFError:  # the server is gone
            return
        if request is None:
            return
        method, args, kwargs = request
        try:
            if method not in WORKER_METHODS:
                raise ValueError(f"a worker answers {' and '.join(WORKER_METHODS)}, not {method!r}")
            reply = ("ok", getattr(translator, method)(*args, **kwargs))
        except TextError as error:
            reply = ("text_error", (error.index, error.reason))
        except Exception as error:  # noqa: BLE001  the batch answers 500; the worker goes on
            reply = ("error", one_line(error))
        connection.send(reply)


def start_workers(
    names: list[str], device: str, workers: int, threads: int, setup=None, options: EngineOptions = AS_SAVED
) -> list[WorkerTranslator]:
    """`workers` worker processes, each opening the model with `threads` CPU threads (started together)."""
    started = [WorkerTranslator(names, device, threads, setup, options) for _ in range(workers)]
    try:
        for worker in started:
            worker.ready()
    except BaseException:
        for worker in started:
            if worker.process.is_alive():
                worker.close()
        raise
    return started


def share_out(jobs: list[Job], parts: int) -> list[list[Job]]:
    """`jobs` in at most `parts` non-empty parts of about as many characters each (the longest job first, each
    into the lightest part), for threads to decode side by side."""
    shares: list[list[Job]] = [[] for _ in range(min(parts, len(jobs)) or 1)]
    weights = [0] * len(shares)
    for characters, job in sorted(((sum(map(len, job.texts)), job) for job in jobs), key=lambda pair: -pair[0]):
        lightest = weights.index(min(weights))
        shares[lightest].append(job)
        weights[lightest] += characters
    return shares


def describe(translator: Translator, names: list[str]) -> dict:
    """What /health says of the model: its kind, folders, parameters, device, weights' type and CUDA graphs
    (torch's) and direction (where its card names one)."""
    from pathlib import Path

    from ..cards import card_metadata

    models = getattr(translator, "models", None)
    kind = translator.kind if models is None else ("aayn ensemble" if len(models) > 1 else models[0].config.model_type)
    info = {"type": kind, "models": names}
    if models is not None:
        info["parameters"] = sum(p.numel() for p in models[0].parameters())
        weight = next(models[0].parameters())
        info.update(device=str(weight.device), dtype=str(weight.dtype).removeprefix("torch."))
        info["cuda_graphs"] = translator.cuda_graphs
        info["compiled_steps"] = translator.compiled_steps
    card = card_metadata(names[0]) if Path(names[0]).is_dir() else None
    if card is not None:
        info["direction"] = f"{card['source_lang']} -> {card['target_lang']}"
    return info
