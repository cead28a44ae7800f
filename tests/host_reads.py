"""Counting what makes the host wait for an accelerator, on the CPU: `HostReads` records the aten calls that
would, and `on_an_accelerator` makes aayn take the path it takes off the host."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class HostReads(TorchDispatchMode):
    """The aten calls of a step that make the host wait for the device on an accelerator: scalar reads (`.item()`,
    `bool(t)`, `t.all()` in an `if`), `nonzero` and boolean-mask selection (their result's size is data), copies to
    the CPU. Recorded at the dispatcher, so the backward pass counts too."""

    aten = torch.ops.aten
    SCALAR = {aten._local_scalar_dense, aten.nonzero, aten.nonzero_static, aten.masked_select, aten.item}
    INDEXING = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_}

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        read = packet in self.SCALAR
        if packet in self.INDEXING:
            read = any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None)
        if packet in (self.aten._to_copy, self.aten.copy_):  # to the CPU from elsewhere
            source, target = args[-1] if packet is self.aten.copy_ else args[0], kwargs.get("device")
            target = args[0].device if packet is self.aten.copy_ else target
            read = target is not None and torch.device(target).type == "cpu" and source.device.type != "cpu"
        if read:
            self.reads.append(str(func))
        return func(*args, **kwargs)


def on_an_accelerator(monkeypatch):
    """Here, a step takes the path it takes where tensors live off the host (on the CPU, reading host memory
    costs no wait, and the masks and the loss use the values: see `ops_aayn.reads_are_free`)."""
    if not torch.cuda.is_available():
        monkeypatch.setattr("aayn.model.ops_aayn.reads_are_free", lambda tensor: False)
    return "cuda" if torch.cuda.is_available() else "cpu"
