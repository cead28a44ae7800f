"""Decoding on a GPU: aayn's `generate` (§6.1's search, and greedy) against MarianMTModel's
`generate` with the same weights, at batches of 32 and of 256 sentences: aayn with the done check every step,
every few steps (`aayn.model.search_aayn.done_check_interval`), and every few steps with its decoder steps
replayed from CUDA graphs (`cuda_graphs=True`, `aayn.formats.aayn.cuda_graphs`; run eagerly off CUDA).

    python benchmarks/decode_gpu.py [--model FOLDER --sources FILE] [--shape base|demo|host] [--device cuda]
                                    [--dtype float32|bf16] [--batches 32 256] [--beams 4 1] [--sentences 512]

With `--model` (a trained aayn folder) and `--sources` (one sentence a line), real sentences with a trained model:
the outputs say what users get. Without, a model of `--shape` with its initial weights on random ids of
newstest2014's lengths (`aayn.bench.base_shape.sentence_lengths`): such a model rarely emits eos, so both searches
run to their limits (aayn's: each source + 50; Marian's: the batch's longest source + 50, as `aayn bench` gives it).
Sentences are sorted by length and batched, as `aayn translate` does; each arm decodes them all once as warm-up
(`first_run_seconds`: the graphs arm captures its graphs there, one per size, which the model keeps for the runs
after it: `graphs_kept`) and then `--repeats` times, alternating, median. Prints one JSON line per (beams, batch):
emitted tokens/s of each arm (tokens up to and including the first eos), the ratio to Marian, how many outputs
differ from aayn's checked-every-step search (none may, up to float rounding for the graphs arm) and from Marian's;
with `--profile`, aayn's arms' first batch under torch.profiler (`profile_step.profiled`: host reads, kernel
launches, host and kernel time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from profile_step import profiled

from aayn.bench.decoding import emitted_tokens, output_tokens
from aayn.formats.aayn.cuda_graphs import kept_steps
from aayn.model import search_aayn
from aayn.model.policy_aayn import paper_length_limit

# the base shape's six layers on each side, each a few numbers wide: a step's time on a CPU is its host's work
HOST_SHAPE = {"vocab_size": 512, "d_model": 16, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
              "encoder_ffn_dim": 32, "decoder_ffn_dim": 32}  # fmt: skip


def inputs(args, config, tokenizer) -> list[list[int]]:
    """The source sentences' ids, sorted by length (longest first)."""
    if tokenizer is not None:
        with open(args.sources, encoding="utf-8") as file:
            lines = [line.strip() for line in file if line.strip()][: args.sentences]
        ids = [tokenizer(line).input_ids for line in lines]
    else:
        from aayn.bench.base_shape import padded_batch, sentence_lengths

        lengths = (sentence_lengths(None) * 100)[: args.sentences]
        padded, mask = padded_batch(lengths, config, torch.Generator().manual_seed(0))
        ids = [row[: int(n)].tolist() for row, n in zip(padded, mask.sum(1))]
    return sorted(ids, key=len, reverse=True)


def batched(ids: list[list[int]], size: int, pad: int, device: str) -> list[dict]:
    batches = []
    for start in range(0, len(ids), size):
        rows = ids[start : start + size]
        width = max(map(len, rows))
        input_ids = torch.tensor([row + [pad] * (width - len(row)) for row in rows], device=device)
        mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows], device=device)
        batches.append({"input_ids": input_ids, "attention_mask": mask})
    return batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model")
    parser.add_argument("--sources")
    parser.add_argument("--shape", default="base", choices=["base", "demo", "host"],
                        help="host: the base depth at a width whose arithmetic is negligible, so that a CPU times "
                        "what each step costs the host (what bounds a GPU that waits on it)")  # fmt: skip
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bf16"])
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 1])
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--every", type=int, default=search_aayn.ACCELERATOR_CHECK_EVERY)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="also profile aayn's arms on their first batch")
    args = parser.parse_args()
    if bool(args.model) != bool(args.sources):
        parser.error("--model and --sources go together")
    from transformers import AutoTokenizer, MarianMTModel

    from aayn import AaynConfig, AaynForConditionalGeneration
    from aayn.formats.marian.weights import marian_config_for, marian_state_dict_from_aayn

    torch.manual_seed(0)
    if args.model:
        model, tokenizer = (
            AaynForConditionalGeneration.from_pretrained(args.model),
            AutoTokenizer.from_pretrained(args.model),
        )
    else:
        from aayn.bench.demo import DEMO_SHAPE

        config = AaynConfig(**{"base": {}, "demo": DEMO_SHAPE, "host": HOST_SHAPE}[args.shape])
        model, tokenizer = AaynForConditionalGeneration(config), None
    model.eval()
    marian = MarianMTModel(marian_config_for(model.config)).eval()
    marian.load_state_dict(marian_state_dict_from_aayn(model, marian), strict=False)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model, marian = model.to(args.device, dtype), marian.to(args.device, dtype)
    config, eos, pad = model.config, model.config.eos_token_id, model.config.pad_token_id
    ids = inputs(args, config, tokenizer)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    default_interval = search_aayn.done_check_interval

    for beams in args.beams:
        for size in args.batches:
            batches = batched(ids, size, pad, args.device)

            def decode(arm: str, batches=batches, beams=beams) -> list[torch.Tensor]:
                outputs = []
                for batch in batches:
                    if arm == "marian":
                        limit = paper_length_limit(int(batch["attention_mask"].sum(1).max()))
                        out = marian.generate(**batch, num_beams=beams, length_penalty=args.alpha, do_sample=False,
                                              max_new_tokens=limit)  # fmt: skip
                    else:
                        every = 1 if arm == "aayn_every_step" else args.every
                        search_aayn.done_check_interval = lambda device, every=every: every
                        try:
                            out = model.generate(**batch, num_beams=beams, length_penalty=args.alpha,
                                                 cuda_graphs=arm == "aayn_graphs")  # fmt: skip
                        finally:
                            search_aayn.done_check_interval = default_interval
                    outputs.append(out)
                return outputs

            arms = ["aayn_every_step", "aayn", "aayn_graphs", "marian"]
            tokens, texts, times, first_run = {}, {}, {arm: [] for arm in arms}, {}
            with torch.no_grad():
                for arm in arms:  # warm-up (the graphs arm captures what the runs after it replay); same outputs
                    sync()
                    start = time.perf_counter()
                    outs = decode(arm)
                    sync()
                    first_run[arm] = round(time.perf_counter() - start, 3)
                    tokens[arm] = sum(emitted_tokens(out, eos) for out in outs)
                    texts[arm] = [row for out in outs for row in output_tokens(out, eos, pad)]
                for _ in range(args.repeats):
                    for arm in arms:
                        sync()
                        start = time.perf_counter()
                        decode(arm)
                        sync()
                        times[arm].append(time.perf_counter() - start)
                profiles = {}  # aayn's first batch under torch.profiler: host reads, launches, host and kernel time
                for arm in arms[:3] if args.profile else ():
                    first = batches[:1]
                    found = profiled(lambda arm=arm, first=first: decode(arm, batches=first), args.device, steps=1)
                    profiles[arm] = {key: round(value, 1) for key, value in found.items() if key != "table"}
            seconds = {arm: statistics.median(t) for arm, t in times.items()}
            rate = {arm: round(tokens[arm] / seconds[arm]) for arm in arms}
            differ = {arm: sum(a != b for a, b in zip(texts["aayn_every_step"], texts[arm])) for arm in arms}
            print(json.dumps({
                "model": args.model or f"{args.shape}, initial weights", "device": args.device, "dtype": args.dtype,
                "beams": beams, "batch": size, "sentences": len(ids), "every": args.every,
                "tokens_per_s": rate, "vs_marian": round(rate["aayn"] / rate["marian"], 2),
                "every_vs_every_step": round(rate["aayn"] / rate["aayn_every_step"], 2),
                "graphs_vs_marian": round(rate["aayn_graphs"] / rate["marian"], 2),
                "graphs_vs_aayn": round(rate["aayn_graphs"] / rate["aayn"], 2),
                "seconds": {arm: round(s, 3) for arm, s in seconds.items()}, "first_run_seconds": first_run,
                "graphs_kept": len(kept_steps(model).entries),
                "differ_every": differ["aayn"], "differ_graphs": differ["aayn_graphs"],
                "differ_marian": differ["marian"], "first_batch_profile": profiles,
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
