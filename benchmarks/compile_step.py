"""torch.compile of the training step against eager, as `torch_compile: true` in a recipe runs it.

    python benchmarks/compile_step.py [--shape demo|base] [--steps 300] [--warmup 20] [--bf16] [--rounds 2]

Each arm runs in a fresh process (eager, compiled, alternating for `--rounds`): the demo recipe's or the paper's
base model, float32 weights (bf16 only through autocast, with `--bf16`), Adam, label smoothing 0.1, on batches
of varying shapes as the max-tokens sampler makes them (newstest2014's sentence lengths, or the built-in sample;
1024 tokens a batch at the demo shape, 4096 at the base shape). `torch.compile(model)` is what the Trainer does
for `torch_compile: true`; shapes change from batch to batch, so the compiler recompiles once with dynamic shapes.
Prints, per arm: the seconds of the first `--warmup` steps (compilation in them), the median step after them, the
seconds the whole run took; then after how many steps the compiled arm has won back its compile time.
"""

import argparse
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor


def batches(shape: str, steps: int, seed: int = 0):
    import torch

    from aayn import AaynConfig
    from aayn.bench import DEMO_SHAPE, padded_batch, sentence_lengths
    from aayn.data import MaxTokensBatchSampler

    config = AaynConfig(**DEMO_SHAPE) if shape == "demo" else AaynConfig()
    generator = torch.Generator().manual_seed(seed)
    lengths = sentence_lengths(os.environ.get("AAYN_WMT14_MINI")) * 40
    sampler = MaxTokensBatchSampler(lengths, 1024 if shape == "demo" else 4096, seed=seed)
    out = []
    while len(out) < steps:
        for batch in sampler:
            chosen = [lengths[i] for i in batch]
            source, mask = padded_batch(chosen, config, generator)
            labels = padded_batch(chosen, config, generator)[0].masked_fill(mask == 0, -100)
            out.append((source, mask, labels))
            if len(out) == steps:
                break
    return config, out


def run_arm(shape: str, steps: int, warmup: int, compiled: bool, bf16: bool) -> dict:
    import torch

    from aayn import AaynForConditionalGeneration

    config, data = batches(shape, steps)
    config.label_smoothing = 0.1
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    step_model = torch.compile(model) if compiled else model
    times = []
    start = time.perf_counter()
    for source, mask, labels in data:
        begin = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = step_model(input_ids=source, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - begin)
    return {
        "first": sum(times[:warmup]),
        "median": statistics.median(times[warmup:]),
        "total": time.perf_counter() - start,
        "loss": float(loss.detach()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["demo", "base"], default="demo")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20, help="steps not in the median (compilation is in them)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    if not 0 < args.warmup < args.steps:
        parser.error(f"--warmup must be at least 1 and less than --steps ({args.steps})")
    results = {"eager": [], "compiled": []}
    context = multiprocessing.get_context("spawn")
    for _ in range(args.rounds):
        for arm, done in results.items():
            with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
                result = pool.submit(
                    run_arm, args.shape, args.steps, args.warmup, arm == "compiled", args.bf16
                ).result()
            done.append(result)
            first, step = result["first"], result["median"] * 1000
            print(f"{arm}: first {args.warmup} steps {first:.1f} s, then {step:.1f} ms a step, "
                  f"whole run {result['total']:.1f} s, last loss {result['loss']:.4f}", flush=True)  # fmt: skip
    eager, compiled = (statistics.median(r["median"] for r in results[arm]) for arm in ("eager", "compiled"))
    extra = statistics.median(r["first"] for r in results["compiled"]) - statistics.median(
        r["first"] for r in results["eager"]
    )
    print(f"median step: eager {eager * 1000:.1f} ms, compiled {compiled * 1000:.1f} ms ({eager / compiled:.2f}x)")
    if compiled < eager:
        print(f"compile time won back after {extra / (eager - compiled):.0f} steps")
    else:
        print(f"compiled is not faster; it costs {extra:.1f} s more in its first {args.warmup} steps")


if __name__ == "__main__":
    main()
