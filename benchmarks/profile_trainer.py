"""Where a step of the Trainer goes (beside profile_step.py's bare step): `AaynTrainer`, the
Trainer of `aayn train` (max_tokens batches cut by length buckets, the collator, Accelerate's device placement, the
divergence watch, transformers' fused Adam, the inverse square-root schedule, §5.4's loss in the model), at a
shape and a token budget, on made-up sentences of newstest2014's lengths (the bench's sample).

    python benchmarks/profile_trainer.py [--device cuda] [--shape base|big|demo] [--tokens 4096 25000]
        [--dtype float32|bf16|bf16_weights] [--attn_implementation eager|sdpa] [--workers N] [--buckets 16 24 ... 256]
        [--compile [--compile_mode M]] [--steps 20] [--warmup 5] [--out DIR]

Per token budget: `--warmup` Trainer steps, then `--steps` timed ones (the device synchronized at both ends only, so
the host may run ahead as in a real run), then 3 under torch.profiler. Prints one JSON line per budget: steps/s,
target tokens/s (labels that are not padding), and per step from the profile: the host time in fetching the batch
(the Trainer's `get_batch_samples`: the data loader, with `--workers` 0 the collator itself, and the copy to the
device), in `training_step` (forward, loss, backward), in the optimizer's step and zero_grad, the rest of the
Trainer's own loop (wall time less those), device kernel time, kernel launches, scalar reads and the host's waits
for the device; with `--compile`, the graphs Dynamo compiled (each beyond the first a recompilation) and its graph
breaks. `--dtype bf16_weights` is `aayn train --bf16_weights true`: the weights in bf16 with float32 master
weights (`aayn.training.master_weights`), no autocast. Needs torch, transformers, accelerate, datasets and evaluate
(the Trainer's imports), no network. With `--out`, the top operators by self time go to DIR/trainer-TOKENS.txt.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from profile_step import SCALAR_READS, SHAPES, SYNCS, step_arguments

REGIONS = {"fetch": "trainer: get_batch_samples", "training_step": "trainer: training_step"}


def sentences(config, count: int, seed: int = 0) -> dict[str, list[list[int]]]:
    """`count` made-up pairs: source lengths drawn from newstest2014's (the bench's sample), each target within
    +-20 % of its source, random ids clear of the special ones, each side ending in eos."""
    from aayn.bench.base_shape import sentence_lengths

    lengths, draw = sentence_lengths(None), random.Random(seed)
    first = max(config.pad_token_id, config.bos_token_id, config.eos_token_id) + 1
    sentence = lambda n: [draw.randrange(first, config.vocab_size) for _ in range(n - 1)] + [config.eos_token_id]
    pairs = {"input_ids": [], "labels": []}
    for _ in range(count):
        source = draw.choice(lengths)
        pairs["input_ids"].append(sentence(source))
        pairs["labels"].append(sentence(max(2, round(source * draw.uniform(0.8, 1.2)))))
    return pairs


class StepClock:
    """A TrainerCallback: the wall time of `steps` steps after `warmup`, then `profiled` steps under torch.profiler."""

    def __init__(self, warmup: int, steps: int, profiled: int, device: str):
        from transformers import TrainerCallback

        self.callback = type("Clock", (TrainerCallback,), {"on_step_begin": self.on_step_begin})()
        self.warmup, self.steps, self.profiled, self.device = warmup, steps, profiled, device
        self.start = self.elapsed = self.profiler = None

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def on_step_begin(self, args, state, control, **kwargs):
        from torch.profiler import ProfilerActivity, profile

        done = state.global_step
        if done == self.warmup:
            self.sync()
            self.start = time.perf_counter()
        elif done == self.warmup + self.steps:
            self.sync()
            self.elapsed = time.perf_counter() - self.start
            cuda = [ProfilerActivity.CUDA] if self.device.startswith("cuda") else []
            self.profiler = profile(activities=[ProfilerActivity.CPU, *cuda])
            self.profiler.__enter__()
            self.profile_start = time.perf_counter()
        elif done == self.warmup + self.steps + self.profiled:
            self.sync()
            self.profile_wall = time.perf_counter() - self.profile_start
            self.profiler.__exit__(None, None, None)


def profiled_trainer(base):
    """`base` (AaynTrainer) with its batch fetch and training step named in the profile."""
    from torch.profiler import record_function

    class Profiled(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.label_counts = []  # each step's target tokens (labels not padding), device tensors read at the end

        def get_batch_samples(self, *args, **kwargs):
            with record_function(REGIONS["fetch"]):
                batches, items = super().get_batch_samples(*args, **kwargs)
            self.label_counts.append(sum((batch["labels"] != -100).sum() for batch in batches))
            return batches, items

        def training_step(self, *args, **kwargs):
            with record_function(REGIONS["training_step"]):
                return super().training_step(*args, **kwargs)

    return Profiled


def breakdown(profiler, steps: int, wall_s: float) -> dict:
    """Per step, from the profile: host time of the named regions, the optimizer, the Trainer's rest; kernels."""
    events = profiler.key_averages()
    host = lambda match: sum(e.cpu_time_total for e in events if match(e.key)) / 1e3 / steps
    named = {name: host(lambda key, label=label: key == label) for name, label in REGIONS.items()}
    named["optimizer"] = host(lambda key: key.startswith("Optimizer.step#"))
    named["zero_grad"] = host(lambda key: key.startswith("Optimizer.zero_grad#"))
    wall_ms = wall_s * 1e3 / steps
    kernel_us = sum(getattr(e, "self_device_time_total", 0) for e in events if e.device_type.name == "CUDA")
    count = lambda names: sum(e.count for e in events if e.key in names) / steps
    return {
        "profiled_step_ms": round(wall_ms, 2),
        **{f"host_ms_{name}": round(value, 2) for name, value in named.items()},
        "host_ms_trainer_rest": round(wall_ms - sum(named.values()), 2),
        "kernel_ms_per_step": round(kernel_us / 1e3 / steps, 2),
        "launches_per_step": count({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel"}),
        "scalar_reads_per_step": count(SCALAR_READS),
        "syncs_per_step": count(SYNCS),
    }


def training_arguments(args, folder: str, steps: int):
    from transformers import Seq2SeqTrainingArguments

    from aayn.training.arguments import GPU_DATALOADER_WORKERS

    cuda = args.device.startswith("cuda")
    compiled = dict(torch_compile=True, torch_compile_mode=args.compile_mode) if args.compile else {}
    return Seq2SeqTrainingArguments(
        output_dir=folder, max_steps=steps, learning_rate=6.9877e-4, lr_scheduler_type="inverse_sqrt",
        warmup_steps=4000, adam_beta1=0.9, adam_beta2=0.98, adam_epsilon=1e-9, weight_decay=0.0, max_grad_norm=0.0,
        bf16=args.dtype == "bf16", tf32=True if cuda else None, use_cpu=not cuda, save_strategy="no",
        logging_steps=100, report_to="none", disable_tqdm=True, seed=1,
        dataloader_num_workers=args.workers if args.workers is not None else GPU_DATALOADER_WORKERS * cuda,
        **compiled,
    )  # fmt: skip


def run(args, tokens: int) -> dict:
    from datasets import Dataset
    from transformers import DataCollatorForSeq2Seq

    from aayn import AaynConfig, AaynForConditionalGeneration
    from aayn.data.tokenizer import word_tokenizer
    from aayn.training.trainer import AaynTrainer

    config = AaynConfig(**SHAPES[args.shape], label_smoothing=0.1)
    if args.attn_implementation:
        config._attn_implementation = args.attn_implementation
    steps = args.warmup + args.steps + 4  # the profile ends as the step after its 3 begins
    pairs = sentences(config, count=max(2000, steps * tokens // 20))
    tokenizer = word_tokenizer(["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(4, config.vocab_size)])
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(config)
    clock = StepClock(args.warmup, args.steps, 3, args.device)
    collate = DataCollatorForSeq2Seq(tokenizer, model=model, pad_to_multiple_of=8 if args.dtype != "float32" else None)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as folder:
        trainer = profiled_trainer(AaynTrainer)(
            model=model, args=training_arguments(args, folder, steps), train_dataset=Dataset.from_dict(pairs),
            processing_class=tokenizer, data_collator=collate, callbacks=[clock.callback], max_tokens=tokens,
            length_buckets=args.buckets, bf16_weights=args.dtype == "bf16_weights",
        )  # fmt: skip
        trainer.train()
    timed = int(sum(trainer.label_counts[args.warmup : args.warmup + args.steps]))
    row = {
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
        "shape": args.shape, "attention": model.config._attn_implementation, "dtype": args.dtype,
        "compiled": args.compile and (args.compile_mode or "default"),
        "token_budget": tokens, "buckets": args.buckets, "workers": trainer.args.dataloader_num_workers,
        "steps_per_s": round(args.steps / clock.elapsed, 2),
        "target_tokens_per_s": round(timed / clock.elapsed),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if args.device.startswith("cuda") else None,
        **breakdown(clock.profiler, 3, clock.profile_wall),
    }  # fmt: skip
    if args.compile:
        from torch._dynamo.utils import counters

        row["graphs"] = counters["stats"]["unique_graphs"]  # each beyond the first a recompilation
        row["graph_breaks"] = sum(counters["graph_break"].values())
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        table = clock.profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
        (args.out / f"trainer-{tokens}.txt").write_text(table, encoding="utf-8")
    return row


def main() -> None:
    parser = step_arguments(__doc__)
    parser.add_argument("--attn_implementation", choices=["eager", "sdpa"], help="default: the config's")
    parser.add_argument("--workers", type=int, help="data loader processes (default: 2 on a GPU, as the recipes)")
    parser.add_argument("--buckets", type=int, nargs="*", default=[16, 24, 32, 48, 64, 96, 128, 256])
    args = parser.parse_args()
    args.buckets = args.buckets or None
    for tokens in args.tokens:
        print(json.dumps(run(args, tokens)), flush=True)


if __name__ == "__main__":
    main()
