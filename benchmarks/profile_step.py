"""Where a training step goes: aayn's training step (§5.4's fused label-smoothed loss, Adam) at a
shape and a token budget, timed and profiled with torch.profiler, its MFU counted on real (unpadded) tokens beside
the bench's padded count.

    python benchmarks/profile_step.py [--device cuda] [--shape base|big|demo] [--tokens 4096 25000]
                                      [--dtype float32|bf16|bf16_weights] [--compile [--compile_mode M]] [--steps 20]
                                      [--warmup 5] [--out DIR]

Per token budget: a batch as the max-tokens sampler makes them (newstest2014's sentence lengths: the bench's
sample), `--warmup` steps, then `--steps` timed steps (the device synchronized around each) and 3 profiled ones.
Prints one JSON line per budget: the median step, target tokens/s (real tokens: labels that are not padding), the
FLOPs of a step written out (3 x the forward's matmul FLOPs: forward + backward's two; real = summed sentence by
sentence over their own lengths, padded = the padded matrices, as `aayn bench` counts them), MFU against the
device's measured matmul peak in that dtype, and from the profile: host (CPU) time of a step, device kernel time,
kernel launches, scalar reads of device values (`.item()`, `bool(t)`) and the host's waits for the device. With
`--out`, the profile's top operators by self time go to DIR/profile-TOKENS.txt. `--dtype bf16_weights`: the model in
bf16 with float32 master weights (`master_weights`) instead of bf16 autocast; `--compile`: `torch.compile` of the
model (what `torch_compile: true` does through the Trainer); `--compile_mode reduce-overhead` replays the compiled
forward and backward from CUDA graphs (Inductor's CUDA graph trees).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

SHAPES = {
    "demo": dict(d_model=128, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512, vocab_size=4000),
    "base": {},  # AaynConfig's defaults: the paper's base model
    "big": dict(d_model=1024, encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=4096,
                decoder_ffn_dim=4096, dropout=0.3),
}  # fmt: skip
# a scalar read (`.item()`, `bool(t)`: aten::item calls this once), and the waits of the host for the device (scalar
# reads, nonzero and copies to the host each make one)
SCALAR_READS = {"aten::_local_scalar_dense"}
SYNCS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}


def step_flops(config, mask: torch.Tensor, labels: torch.Tensor) -> tuple[int, int]:
    """(real, padded) FLOPs of one training step: 3 x the forward's matmul FLOPs."""
    from aayn.bench.base_shape import forward_flops

    sources, targets = mask.sum(1).tolist(), (labels != -100).sum(1).tolist()
    real = sum(forward_flops(config, 1, s, t) for s, t in zip(sources, targets))
    padded = forward_flops(config, mask.shape[0], mask.shape[1], labels.shape[1])
    return 3 * real, 3 * padded


def profiled(step, device: str, steps: int = 3) -> dict:
    """Host time, device kernel time, launches and host reads per step, over `steps` profiled steps."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    events = prof.key_averages()
    count = lambda names: sum(e.count for e in events if e.key in names)
    kernel_us = sum(getattr(e, "self_device_time_total", 0) for e in events if e.device_type.name == "CUDA")
    top = events.table(sort_by="self_cuda_time_total" if kernel_us else "self_cpu_time_total", row_limit=25)
    return {
        "host_ms_per_step": sum(e.self_cpu_time_total for e in events) / 1e3 / steps,
        "kernel_ms_per_step": kernel_us / 1e3 / steps,
        "launches_per_step": count({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel"}) / steps,
        "scalar_reads_per_step": count(SCALAR_READS) / steps,
        "syncs_per_step": count(SYNCS) / steps,
        "table": top,
    }


def master_weights(model, fused: bool | None) -> tuple:
    """`--dtype bf16_weights`, fairseq's `--bf16` (its FP16Optimizer): the model cast to bf16 (no autocast, so no
    cast in the step; the fused loss still sums float32 probabilities), Adam on float32 master copies of its
    weights, whose gradients the bf16 ones are copied into before each update. Returns (the optimizer, the
    model's parameters, the master weights, gradients allocated)."""
    master = [param.detach().float().clone().requires_grad_() for param in model.parameters()]
    for weight in master:
        weight.grad = torch.zeros_like(weight)
    model.to(torch.bfloat16)
    optimizer = torch.optim.Adam(master, lr=1e-7, betas=(0.9, 0.98), eps=1e-9, fused=fused)
    return optimizer, list(model.parameters()), master


def run(args, tokens: int) -> dict:
    from aayn import AaynConfig, AaynForConditionalGeneration
    from aayn.bench.base_shape import matmul_peak, sentence_lengths, token_batch

    device, bf16 = args.device, args.dtype == "bf16"
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    config = AaynConfig(**SHAPES[args.shape], label_smoothing=0.1)
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(config).to(device).train()
    lengths = sentence_lengths(None) * 40
    source, mask, labels = token_batch(lengths, tokens, config, torch.Generator().manual_seed(0), device)
    fused = device.startswith("cuda") or None
    optimizer, params, master = master_weights(model, fused) if args.dtype == "bf16_weights" else (None, None, None)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-7, betas=(0.9, 0.98), eps=1e-9, fused=fused)
    forward = torch.compile(model, mode=args.compile_mode) if args.compile else model
    params_data = None if params is None else [param.detach() for param in params]  # once: the same storage

    def step():
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
            loss = forward(input_ids=source, attention_mask=mask, labels=labels).loss
        loss.backward()
        if master is not None:  # the bf16 gradients into the float32 master weights' (one multi-tensor copy)
            torch._foreach_copy_([weight.grad for weight in master], [param.grad for param in params])
        optimizer.step()
        if master is not None:  # and the updated master weights back into the bf16 model
            torch._foreach_copy_(params_data, master)
        model.zero_grad(set_to_none=True)

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    start = time.perf_counter()
    for _ in range(args.warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - start
    times = []
    for _ in range(args.steps):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    real, padded = step_flops(config, mask, labels)
    peak = matmul_peak(device, torch.float32 if args.dtype == "float32" else torch.bfloat16)
    target_tokens = int((labels != -100).sum())
    profile = profiled(step, device)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"profile-{tokens}.txt").write_text(profile["table"], encoding="utf-8")
    profile.pop("table")
    return {
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device,
        "shape": args.shape,
        "dtype": args.dtype,
        "compiled": args.compile and (args.compile_mode or "default"),
        "token_budget": tokens,
        "batch": list(source.shape),
        "target_tokens": target_tokens,
        "padded_target_tokens": labels.numel(),
        "warmup_s": round(warmup_s, 2),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.startswith("cuda") else None,
        "median_step_ms": round(median * 1e3, 2),
        "target_tokens_per_s": round(target_tokens / median),
        "real_tflop_per_step": round(real / 1e12, 3),
        "padded_tflop_per_step": round(padded / 1e12, 3),
        "peak_tflops": round(peak / 1e12, 1),
        "mfu_real": round(real / median / peak, 4),
        "mfu_padded": round(padded / median / peak, 4),
        **{key: round(value, 2) for key, value in profile.items()},
    }


def step_arguments(description: str) -> argparse.ArgumentParser:
    """The options of a step's profile, here and in profile_trainer.py."""
    parser = argparse.ArgumentParser(description=description.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default="base", choices=sorted(SHAPES))
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 25000])
    parser.add_argument("--dtype", default="bf16", choices=["float32", "bf16", "bf16_weights"])
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--compile_mode", help="torch.compile's mode (reduce-overhead: CUDA graphs)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path)
    return parser


def main() -> None:
    args = step_arguments(__doc__).parse_args()
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # the recipe's `tf32: auto`
    for tokens in args.tokens:
        print(json.dumps(run(args, tokens)), flush=True)


if __name__ == "__main__":
    main()
