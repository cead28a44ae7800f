"""What a CUDA graph would save a decoder step of §6.1's search (issue 81 point 3), measured before building it
into the search: one step of the folded beams (`decoding_aayn.plain_step`, aayn's step after the first) against
the same step with static shapes (buffers for every position up to the limit, the position a tensor, the slots
not yet written masked) run eagerly and replayed from a captured `torch.cuda.CUDAGraph`.

    python benchmarks/decode_graph.py [--device cuda] [--shape base|demo] [--sentences 32] [--beams 4]
                                      [--source 30] [--steps 60] [--repeats 3]

The three arms decode the same teacher-forced steps (random tokens and beam parents, seeded) after the same first
step, and must give the same log-probabilities (within float rounding: the static arms attend over masked slots
too). Prints one JSON line: milliseconds per step of each arm, and the largest difference of each static arm's
log-probabilities from aayn's. On a CPU the graph arm is left out (its timing and equality need CUDA).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.nn import functional as F

from aayn.model.decoding_aayn import layers_step
from aayn.model.ops_aayn import additive_bias


class StaticSlots:
    """The folded cache's self-attention with static shapes: keys and values of every position up to `capacity`
    in zeroed buffers (slot p * k + b), each beam's path in `ancestry` (n, k, capacity), the step's position in a
    tensor `position`; slots off a beam's path or not yet written are masked."""

    def __init__(self, folded, capacity: int, dtype: torch.dtype):
        slots, k = folded.self_attention_cache, folded.folded_beams
        n, written = slots.ancestry.shape[0], slots.written
        device = slots.ancestry.device
        self.k, self.capacity, self.dtype = k, capacity, dtype
        self.keys, self.values = [], []
        for keys, values in zip(slots.keys, slots.values):
            for source, target in ((keys, self.keys), (values, self.values)):
                buffer = source.new_zeros((*source.shape[:2], capacity * k, source.shape[3]))
                buffer[:, :, : written * k] = source[:, :, : written * k]
                target.append(buffer)
        self.ancestry = torch.zeros((n, k, capacity), dtype=torch.long, device=device)
        self.ancestry[:, :, :written] = slots.ancestry
        self.position = torch.full((), written, dtype=torch.long, device=device)  # the position this step writes
        self.beam = torch.arange(k, device=device)
        self.slot_position = torch.arange(capacity, device=device)
        self.cross = folded.cross_attention_cache
        self.padding_bias = folded.padding_bias
        self.record_cross = None

    # what `_layer_step` asks of a cache
    @property
    def self_attention_cache(self):
        return self

    @property
    def cross_attention_cache(self):
        return self.cross

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int):
        slots = self.position * self.k + self.beam  # (k,)
        self.keys[layer_idx].index_copy_(2, slots, key)
        self.values[layer_idx].index_copy_(2, slots, value)
        return self.keys[layer_idx], self.values[layer_idx]

    def follow(self, parents: torch.Tensor) -> None:
        self.ancestry.copy_(self.ancestry.gather(1, parents[:, :, None].expand(-1, -1, self.capacity)))

    def layout(self, hidden_states: torch.Tensor):
        own = self.beam.expand(self.ancestry.shape[0], -1)[:, :, None]  # (n, k, 1)
        self.ancestry.index_copy_(2, self.position[None], own)
        off_path = self.ancestry[:, :, :, None] != self.beam  # (n, k, capacity, k)
        off_path |= (self.slot_position > self.position)[None, None, :, None]
        bias = additive_bias(off_path, self.dtype).view(-1, 1, self.k, self.capacity * self.k)
        return hidden_states.view(-1, self.k, hidden_states.shape[-1]), bias, self.padding_bias


def static_step(model, cache: StaticSlots, tokens: torch.Tensor, parents: torch.Tensor, positions: torch.Tensor):
    """One step with static shapes: the beams continue `parents` (n, k), then `tokens` (n * k, 1) are decoded."""
    decoder = model.get_decoder()
    cache.follow(parents)
    embeds = decoder.embed.embed_tokens.forward(tokens)
    hidden = embeds * decoder.embed.scale + positions.index_select(0, cache.position[None]).to(embeds.dtype)
    hidden = layers_step(decoder, *cache.layout(hidden), cache)
    logits = model._output_logits(hidden.view(-1, hidden.shape[-1]))
    cache.position.add_(1)
    return F.log_softmax(logits.float(), dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default="base", choices=["base", "demo"])
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--source", type=int, default=30)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from aayn import AaynConfig, AaynForConditionalGeneration
    from aayn.bench.common import DEMO_SHAPE

    torch.manual_seed(0)
    config = AaynConfig(**(DEMO_SHAPE if args.shape == "demo" else {}))
    model = AaynForConditionalGeneration(config).eval().to(args.device)
    n, k, steps, device = args.sentences, args.beams, args.steps, args.device
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(4, config.vocab_size, (n, args.source), generator=generator).to(device)
    mask = torch.ones_like(source)
    tokens = torch.randint(4, config.vocab_size, (steps + 1, n * k, 1), generator=generator).to(device)
    parents = torch.stack([torch.rand(n, k, generator=generator).argsort(-1) for _ in range(steps + 1)]).to(device)
    capacity = steps + 1
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def started():
        """aayn's decoding after its first step (the full decoder, which writes the encoder's keys and values)."""
        decoding = model.start_decoding(source, mask, k, capacity)
        history = torch.full((n * k, capacity + 1), config.decoder_start_token_id, device=device)
        decoding.log_probs(history, 1, torch.float32)
        return decoding, history

    @torch.no_grad()
    def run_aayn():
        decoding, history = started()
        outs = []
        sync()
        start = time.perf_counter()
        for step in range(2, steps + 2):
            decoding.next_step(parents[step - 2], None)
            history[:, step - 1] = tokens[step - 2, :, 0]
            outs.append(decoding.log_probs(history, step, torch.float32))
        sync()
        return outs, (time.perf_counter() - start) / steps

    @torch.no_grad()
    def run_static(graphed: bool):
        decoding, _ = started()
        cache = StaticSlots(decoding.cache, capacity, torch.float32)
        positions = decoding.positions
        token_in, parents_in = tokens[0].clone(), parents[0].clone()
        step = lambda: static_step(model, cache, token_in, parents_in, positions)
        if graphed:
            saved = [t.clone() for t in (cache.ancestry, cache.position, *cache.keys, *cache.values)]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                graph_out = step()
            for target, source_ in zip((cache.ancestry, cache.position, *cache.keys, *cache.values), saved):
                target.copy_(source_)  # the warm-up and capture stepped the state on: back to after step 1
        outs = []
        sync()
        start = time.perf_counter()
        for index in range(steps):
            token_in.copy_(tokens[index])
            parents_in.copy_(parents[index])
            if graphed:
                graph.replay()
                outs.append(graph_out.clone())
            else:
                outs.append(step())
        sync()
        return outs, (time.perf_counter() - start) / steps

    arms = {"aayn": run_aayn, "static": lambda: run_static(False)}
    if device.startswith("cuda"):
        arms["static_graph"] = lambda: run_static(True)
    outputs, times = {}, {arm: [] for arm in arms}
    for _ in range(args.repeats + 1):  # the first round warms up
        for arm, run in arms.items():
            outputs[arm], seconds = run()
            times[arm].append(seconds)
    ms = {arm: round(statistics.median(t[1:]) * 1e3, 3) for arm, t in times.items()}
    differ = {
        arm: max(float((a - b).abs().max()) for a, b in zip(outputs[arm], outputs["aayn"]))
        for arm in arms
        if arm != "aayn"
    }
    print(json.dumps({
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device, "shape": args.shape,
        "sentences": n, "beams": k, "steps": steps, "ms_per_step": ms,
        "speed_vs_aayn": {arm: round(ms["aayn"] / value, 2) for arm, value in ms.items()},
        "largest_log_prob_difference": differ,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
