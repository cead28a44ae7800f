"""What the training rows (`aayn.bench`) and the decoding rows (`aayn.bench.decoding`) share."""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path

import torch

# The demo recipe's model (recipes/demo.yaml), the regime users train in on a CPU or a single GPU
DEMO_SHAPE = dict(vocab_size=4000, d_model=128, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512, init_std=0.02)  # fmt: skip


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
