"""What the training rows (`aayn.bench`) and the decoding rows (`aayn.bench.decoding`) share."""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path

import torch
import yaml

# The demo recipe (recipes/demo.yaml, shipped in the package): the regime users train in on a CPU or a single GPU.
# Its model's shape (as AaynConfig fields), the folder it saves the model in, and the alpha it decodes with.
DEMO_RECIPE = yaml.safe_load((Path(__file__).parents[1] / "recipes" / "demo.yaml").read_text(encoding="utf-8"))
DEMO_SHAPE = {
    **{key: DEMO_RECIPE[key] for key in ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "init_std")},
    **{f"{side}_attention_heads": DEMO_RECIPE["attention_heads"] for side in ("encoder", "decoder")},
    **{f"{side}_ffn_dim": DEMO_RECIPE["ffn_dim"] for side in ("encoder", "decoder")},
}
DEMO_RUN = DEMO_RECIPE["output_dir"]
DEMO_ALPHA = DEMO_RECIPE["length_penalty"]


def demo_run_model() -> str | None:
    """The demo job's saved model, if `aayn train recipes/demo.yaml` has run here."""
    return DEMO_RUN if Path(DEMO_RUN, "config.json").is_file() else None


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def memory_probe(device: str):
    """(reset, read) for the peak memory of a call, in MiB: allocated CUDA memory, or on Linux CPUs the growth
    of the process's peak resident set (VmHWM, reset through /proc/self/clear_refs) over its size before the call,
    after glibc's malloc_trim has returned cached free memory (else one arm would reuse what the other freed).
    torch has no peak-memory counter on CPU, and the resident set also sees CTranslate2's allocations."""
    if device.startswith("cuda"):
        return torch.cuda.reset_peak_memory_stats, lambda: torch.cuda.max_memory_allocated() / 2**20
    status, clear = Path("/proc/self/status"), Path("/proc/self/clear_refs")
    if not (status.is_file() and clear.is_file()):
        return (lambda: None), (lambda: None)

    def field(name: str) -> float:
        line = next(line for line in status.read_text().splitlines() if line.startswith(name))
        return int(line.split()[1]) / 1024  # kB

    before = {}
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        trim = lambda pad: None

    def reset() -> None:
        gc.collect()
        trim(0)
        clear.write_text("5")  # resets VmHWM to the current resident set
        before["rss"] = field("VmRSS:")

    return reset, lambda: field("VmHWM:") - before["rss"]
