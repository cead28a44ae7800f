"""CUDA graphs' contract, on the CPU: `ReplayedGraph` records the aten calls made between `capture_begin` and
`capture_end` and `replay` runs the same calls again on the same tensors, each call's result written into the
tensor the capture returned. So a replay sees only what a CUDA graph would see: the values in its tensors' memory
at replay time; a number the host read or computed during capture (a position, a count) stays as it was then, and
a tensor replaced by a new object after capture is not read. A host read during capture raises, as CUDA's does.
(Unlike CUDA, the captured calls also run once at capture; `aayn.formats.aayn.cuda_graphs` puts back what they move.)"""

import torch
from host_reads import HostReads
from torch.utils._pytree import tree_leaves


class _Recorder(HostReads):
    def __init__(self, calls: list):
        super().__init__()
        self.calls = calls

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        before = len(self.reads)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if len(self.reads) > before:
            raise RuntimeError(f"{func}: operation not permitted when stream is capturing (a host read)")
        fresh = not any(result.alias_info for result in func._schema.returns)  # not in place, not a view
        self.calls.append((func, args, kwargs, out if fresh else None))
        return out


class ReplayedGraph:
    """`torch.cuda.CUDAGraph` for the CPU (see the module's text)."""

    made: list = []  # every graph captured, for the tests to count

    def __init__(self):
        self.calls, self.recorder, self.replays = [], None, 0

    def capture_begin(self, pool=None, capture_error_mode: str = "global"):
        self.recorder = _Recorder(self.calls)
        self.recorder.__enter__()

    def capture_end(self):
        self.recorder.__exit__(None, None, None)
        ReplayedGraph.made.append(self)

    def replay(self):
        self.replays += 1
        for func, args, kwargs, out in self.calls:
            result = func(*args, **kwargs)
            if out is not None:
                for recorded, new in zip(tree_leaves(out), tree_leaves(result)):
                    if isinstance(recorded, torch.Tensor):
                        recorded.copy_(new)


class _Stream:
    def wait_stream(self, other):
        pass


class _StreamContext:
    def __init__(self, stream):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def replay_graphs_on_the_cpu(monkeypatch) -> list:
    """`aayn.formats.aayn.cuda_graphs` captures and replays its steps on the CPU with `ReplayedGraph`; returns the
    graphs made."""
    monkeypatch.setattr("aayn.formats.aayn.cuda_graphs.replays_graphs", lambda device: True)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", ReplayedGraph)
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *args: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", _StreamContext)
    monkeypatch.setattr(ReplayedGraph, "made", [])
    return ReplayedGraph.made
