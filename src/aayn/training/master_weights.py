"""bf16 training with the model's weights in bfloat16 and float32 master weights (fairseq's `--bf16`, its
`FP16Optimizer`), the other way to train in bf16 than autocast, which `aayn train --bf16_weights true` takes.

Autocast keeps float32 weights and casts them (and some activations back) around each operator, each cast a kernel
the host launches (docs/measurements.md counts them). Here the step runs on bf16 weights with no cast;
Adam updates float32 copies (the master weights), whose gradients are the bf16 ones copied in before each update,
and the updated masters are copied back into the model after it: one multi-tensor copy each way a step. Neither
transformers nor Accelerate has this (Accelerate's bf16 is autocast; FSDP2's MixedPrecisionPolicy does it for sharded
models, for which aayn keeps it).

What a user sees stays float32: every folder saved (checkpoints, the final model) holds the master weights, and after
training the model is float32 again, holding them (the test, the averaging). As in fairseq, gradients accumulate
over micro-batches and are reduced over processes in the model's bf16; unlike fairseq's `FP16Optimizer`, which copies
them to float32 first and clips the copies, they are clipped in bf16 (the Trainer's clipping, before the copy).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn


class MasterWeights:
    """The model cast to bf16 with its float32 parameters kept aside as the masters (the same tensors: no copy);
    `attach` points an optimizer built over the model's parameters at them."""

    def __init__(self, model: nn.Module):
        self.params = list(model.parameters())  # frozen ones too: the step runs in one dtype, a save holds them all
        self.masters = []
        for param in self.params:
            if param.dtype != torch.float32:
                raise ValueError(
                    f"bf16_weights keeps a float32 model's weights as its masters; this model holds "
                    f"{param.dtype} weights (saved so?): load it in float32, or drop bf16_weights"
                )
            master = param.detach()
            param.grad = None
            param.data = master.to(torch.bfloat16)
            self.masters.append(master)
        # the parameters' bf16 tensors, read once: the copy back writes into them at every step
        self.views = [param.detach() for param in self.params]

    def attach(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The optimizer (no step taken yet) updates the masters instead of the model's parameters, its groups and
        settings as they were; before each of its steps the gradients are copied in, after it the weights out."""
        master_of = {id(param): master for param, master in zip(self.params, self.masters)}
        for group in optimizer.param_groups:
            group["params"] = [master_of[id(param)] for param in group["params"]]
        optimizer.register_step_pre_hook(lambda *_: self.gradients_in())
        optimizer.register_step_post_hook(lambda *_: self.weights_out())
        return optimizer

    def gradients_in(self) -> None:
        """The bf16 gradients into the masters' float32 ones (allocated once); a parameter without a gradient this
        step leaves its master without one, so that the optimizer skips it as it would the parameter."""
        sources, targets = [], []
        for param, master in zip(self.params, self.masters):
            if param.grad is None:
                master.grad = None
                continue
            if master.grad is None:
                master.grad = torch.empty_like(master)
            sources.append(param.grad)
            targets.append(master.grad)
        if targets:
            torch._foreach_copy_(targets, sources)

    def weights_out(self) -> None:
        torch._foreach_copy_(self.views, self.masters)

    @contextmanager
    def float32(self):
        """The model holding its float32 masters for the block (a save: the folder gets the master weights and
        says float32), its bf16 weights back after it; nothing is copied."""
        kept = [param.data for param in self.params]
        for param, master in zip(self.params, self.masters):
            param.data = master
        try:
            yield
        finally:
            for param, data in zip(self.params, kept):
                param.data = data

    def release(self) -> None:
        """The model float32 for good, holding the masters (after training); their gradients let go."""
        for param, master in zip(self.params, self.masters):
            param.data, param.grad, master.grad = master, None, None
