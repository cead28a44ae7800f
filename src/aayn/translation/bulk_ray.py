"""`aayn translate --input ... --output_dir ... --ray`: the shards still missing handed to Ray Data
(`ray.data.from_items(...).map_batches`) with a callable class that opens one translator per actor (any format the
command line opens: an aayn folder, a CTranslate2 or ONNX export; the same settings, glossary and alignments) and
writes each shard as `aayn.translation.bulk` does, whole or not at all. `--ray_address` joins an existing cluster;
without it a local one is started (`--concurrency` actors, `--num_cpus_per_worker`, `--num_gpus_per_worker` each). Ray
shows its progress; a summary line follows. Ray and torch do the distributing; aayn gives them the model, the shards
and the translator (`pip install 'aayn[ray]'`)."""

from __future__ import annotations

import time
from pathlib import Path

from ..formats.translator import AS_SAVED, EngineOptions
from .bulk import BulkSettings, missing, summary, translate_shard


class ShardTranslator:
    """One Ray actor: a translator opened once, then each batch of shard paths translated shard by shard."""

    def __init__(self, names: list[str], device: str, needs: tuple, settings: BulkSettings,
                 options: EngineOptions = AS_SAVED):  # fmt: skip
        from .opening import open_translator

        self.translator = open_translator(names, device, needs, options=options)
        self.translator.target_token = settings.target_token
        self.settings = settings

    def __call__(self, batch: dict) -> dict:
        lines = [translate_shard(self.translator, Path(shard), self.settings) for shard in batch["shard"]]
        return {"shard": list(batch["shard"]), "lines": lines}


def started(address: str | None, concurrency: int, num_cpus: float, num_gpus: float = 0.0):
    """Ray, joined at `address` or started here with room for the actors' CPUs and with the GPUs Ray finds on this
    machine (it hands each actor its share of them in CUDA_VISIBLE_DEVICES); a one-line error where it cannot be, or
    where a local Ray has fewer GPUs than the actors hold (a cluster joined may still add GPU nodes)."""
    try:
        import ray
    except ImportError as error:
        raise ImportError("--ray needs Ray: pip install 'aayn[ray]'") from error
    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=max(1, round(concurrency * num_cpus)), include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as error:
            where = f"--ray_address {address}" if address else "a local Ray"
            raise ValueError(f"{where}: cannot start or reach Ray ({str(error).splitlines()[0]})") from None
    found = ray.cluster_resources().get("GPU", 0)
    if num_gpus and not address and found < concurrency * num_gpus:
        raise ValueError(f"--concurrency {concurrency} actors of --num_gpus_per_worker {num_gpus:g}: the local Ray "
                         f"finds {found:g} GPUs on this machine (a cluster that has them: --ray_address)")  # fmt: skip
    return ray


def translate_shards_on_ray(names: list[str], device: str, needs: tuple, shards: list[Path], settings: BulkSettings,
                            *, address=None, concurrency=1, num_cpus=1.0, num_gpus=0.0,
                            options: EngineOptions = AS_SAVED) -> dict:  # fmt: skip
    """Every shard without an output, translated by `concurrency` Ray actors (computing as `options` ask,
    `EngineOptions`); a summary."""
    started_at, todo = time.perf_counter(), missing(shards, settings.output_dir)
    if not todo:
        return summary(len(shards), 0, 0, time.perf_counter() - started_at, settings.output_dir)
    ray = started(address, concurrency, num_cpus, num_gpus)
    items = ray.data.from_items([{"shard": str(shard)} for shard in todo])
    done = items.map_batches(
        ShardTranslator,
        fn_constructor_kwargs={
            "names": names,
            "device": device,
            "needs": needs,
            "settings": settings,
            "options": options,
        },
        batch_size=1,
        concurrency=concurrency,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
    )
    try:
        rows = done.take_all()
    except Exception as error:  # noqa: BLE001  a worker's failure, as Ray wraps it: its own line
        raise ValueError(worker_fault(error)) from None
    lines = sum(row["lines"] for row in rows)
    missing(shards, settings.output_dir)  # what an actor killed mid-shard left half-written, removed
    return summary(len(shards), len(rows), lines, time.perf_counter() - started_at, settings.output_dir)


def worker_fault(error: BaseException) -> str:
    """The line a worker's exception said (a bad shard's ValueError), out of Ray's wrapping of it (its traceback's
    text, where the worker's own exception is named)."""
    import re

    said = re.findall(r"^\s*(?:ValueError|FileNotFoundError|ImportError): (.+)$", str(error), re.MULTILINE)
    if said:
        return said[-1].strip()
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(error).__name__
