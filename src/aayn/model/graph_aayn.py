"""The decoder steps of one batch of §6.1's search with static shapes, replayed from a CUDA graph
(`generate(cuda_graphs=True)`): on a GPU a step of a small batch is bound by the host launching its ~150 kernels
one by one; a graph launches them all at once. What a graph replays must keep its shapes and its memory, so:

- self-attention's keys and values go into slots allocated for every position up to the batch's limit (slot
  p * k + b for beam b's position p, as in `FoldedSearchCache`), zeroed, each step's position a tensor, and each
  step's mask hides the slots not yet written as well as those off a beam's path;
- the rows stay: a sentence that leaves the search keeps its rows in the graph (computed, never read), the
  search's live sentences mapped to them (`live`), until at most half are live, when the graph is captured again
  for those alone (`compact`);
- the step's inputs (the beams' last tokens and parents) are copied into buffers the graph reads.

`GraphedSteps` takes over a `Decoding` after its first step (which writes the encoder's keys and values): the
same functions on the same weights as `decoding_aayn.plain_step`, so the log-probabilities equal its own up to
float rounding (the softmax runs over the masked slots too). On a device without CUDA graphs the same static
steps run eagerly (`replays_graphs`; tests on a CPU check them so, and captured and replayed by an emulation of
CUDA graphs). This file travels with every saved checkpoint: it imports only torch and transformers.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers.utils import logging

from .ops_aayn import additive_bias

logger = logging.get_logger(__name__)


def replays_graphs(device: torch.device) -> bool:
    """Whether the static steps on `device` are replayed from CUDA graphs (elsewhere they run eagerly)."""
    return device.type == "cuda"


class StaticSlots:
    """The folded cache's self-attention with static shapes: keys and values of every position up to `capacity`
    in zeroed buffers (n, heads, capacity * k, head_dim), each beam's path in `ancestry` (n, k, capacity), the
    position the next step writes in the tensor `position`; the encoder's keys and values and the padding bias
    as the first step left them. What `decoding_aayn.layers_step` asks of a cache."""

    def __init__(self, keys, values, ancestry, position, cross, padding_bias, dtype):
        self.keys, self.values, self.ancestry, self.position = keys, values, ancestry, position
        self.cross_attention_cache, self.padding_bias, self.dtype = cross, padding_bias, dtype
        self.k, self.capacity = ancestry.shape[1], ancestry.shape[2]
        self.beam = torch.arange(self.k, device=ancestry.device)
        self.slot_position = torch.arange(self.capacity, device=ancestry.device)
        self.parents = self.beam.expand(ancestry.shape[0], -1).clone()  # (n, k) the step's input: each its own
        self.record_cross = None

    @classmethod
    def of(cls, folded, capacity: int) -> StaticSlots:
        """The slots of a `FoldedSearchCache` after its first step, in buffers of `capacity` positions."""
        slots, k = folded.self_attention_cache, folded.folded_beams
        written, ancestry = slots.written, slots.ancestry
        keys, values = [], []
        for source_keys, source_values in zip(slots.keys, slots.values):
            for source, target in ((source_keys, keys), (source_values, values)):
                buffer = source.new_zeros((*source.shape[:2], capacity * k, source.shape[3]))
                buffer[:, :, : written * k] = source[:, :, : written * k]
                target.append(buffer)
        paths = ancestry.new_zeros((*ancestry.shape[:2], capacity))
        paths[:, :, :written] = ancestry
        position = torch.full((), written, dtype=torch.long, device=ancestry.device)
        return cls(keys, values, paths, position, folded.cross_attention_cache, folded.padding_bias, folded.dtype)

    def rows(self, sentences: torch.LongTensor) -> StaticSlots:
        """These slots of `sentences` only, in new buffers (the position, paths and parents still to follow as
        they are)."""
        cross = _CrossRows(self.cross_attention_cache, sentences)
        pick = lambda tensors: [tensor.index_select(0, sentences) for tensor in tensors]
        kept = StaticSlots(pick(self.keys), pick(self.values), self.ancestry.index_select(0, sentences),
                           self.position.clone(), cross, self.padding_bias.index_select(0, sentences),
                           self.dtype)  # fmt: skip
        kept.parents.copy_(self.parents.index_select(0, sentences))
        return kept

    @property
    def self_attention_cache(self) -> StaticSlots:
        return self

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int):
        """Write the step's keys and values (n, heads, k, head_dim) into their slots; return every slot."""
        slots = self.position * self.k + self.beam  # (k,)
        self.keys[layer_idx].index_copy_(2, slots, key)
        self.values[layer_idx].index_copy_(2, slots, value)
        return self.keys[layer_idx], self.values[layer_idx]

    def layout(self, hidden_states: torch.Tensor):
        """As `FoldedSearchCache.attention_layout`, with the beams first following their `parents`: the step's
        input (n, k, d), the self-attention bias (n, 1, k, capacity * k: 0 on a beam's path up to the position)
        and the padding bias."""
        n, k = self.ancestry.shape[:2]
        self.ancestry.copy_(self.ancestry.gather(1, self.parents[:, :, None].expand(-1, -1, self.capacity)))
        self.ancestry.index_copy_(2, self.position[None], self.beam.expand(n, -1)[:, :, None])
        off_path = self.ancestry[:, :, :, None] != self.beam  # (n, k, capacity, k)
        off_path |= (self.slot_position > self.position)[None, None, :, None]
        bias = additive_bias(off_path, self.dtype).view(n, 1, k, self.capacity * k)
        return hidden_states.view(n, k, hidden_states.shape[-1]), bias, self.padding_bias


class _CrossRows:
    """The encoder's keys and values of some sentences, per layer, as `decoding_aayn._attention_step` reads a
    cache's `cross_attention_cache.layers`."""

    def __init__(self, cross, sentences: torch.LongTensor):
        self.layers = [_Layer(layer.keys.index_select(0, sentences), layer.values.index_select(0, sentences))
                       for layer in cross.layers]  # fmt: skip


class _Layer:
    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values


class GraphedSteps:
    """A `Decoding`'s steps after its first, with static shapes (`StaticSlots`), replayed from a CUDA graph
    captured at the first of them (on CUDA; elsewhere run eagerly). `log_probs` and `next_step` keep
    `Decoding`'s contract for the live sentences, whichever rows the graph holds."""

    def __init__(self, decoding, capacity: int, dtype: torch.dtype, layers_step):
        """`layers_step`: `decoding_aayn.layers_step`, the decoder's layers at a step of folded beams."""
        self.decoding, self.dtype, self.layers_step = decoding, dtype, layers_step
        self.slots = StaticSlots.of(decoding.cache, capacity)
        self.written = decoding.cache.self_attention_cache.written  # positions begun (the host's count)
        self.live = None  # the rows of the sentences still searched, in the search's order (None: every row)
        self.captured = replays_graphs(self.slots.ancestry.device)  # off after a failed capture
        self._start()

    def _start(self) -> None:
        """A buffer for the step's input for the rows `slots` holds; their graph is captured at the next step."""
        n, k = self.slots.ancestry.shape[:2]
        self.tokens = torch.zeros((n * k, 1), dtype=torch.long, device=self.slots.ancestry.device)
        self.graph, self.output = None, None

    def step(self) -> torch.Tensor:
        """One decoder step of every row: (rows, vocab) log-probabilities in `dtype` (the graph's captured body)."""
        decoder, model, slots = self.decoding.decoder, self.decoding.model, self.slots
        embed = decoder.embed
        embeds = embed.embed_tokens.forward(self.tokens)
        position = self.decoding.positions.index_select(0, slots.position[None]).to(embeds.dtype)
        hidden_states = self.layers_step(decoder, *slots.layout(embeds * embed.scale + position), slots)
        logits = model._output_logits(hidden_states.view(-1, hidden_states.shape[-1]))
        slots.position.add_(1)
        return F.log_softmax(logits.to(self.dtype), dim=-1)

    def log_probs(self, history: torch.Tensor, step: int) -> torch.Tensor:
        """(live rows, vocab) log-probabilities of the next token after `history[:, :step]` (the live beams')."""
        n, k = self.slots.ancestry.shape[:2]
        self.decoding.decoder.embed.warn_of_length(self.written + 1)
        last = history[:, step - 1 : step]
        if self.live is None:
            self.tokens.copy_(last)
        else:
            self.tokens.view(n, k).index_copy_(0, self.live, last.view(-1, k))
        output = self._replay()
        self.written += 1
        if self.live is None:  # the search changes its log-probabilities in place; a graph's output stays its own
            return output if self.graph is None else output.clone()
        return output.view(n, k, -1).index_select(0, self.live).view(-1, output.shape[-1])

    def next_step(self, parents: torch.LongTensor | None, keep: torch.LongTensor | None) -> None:
        """The live beams continue `parents` (m, k) (None: each its own), then only the live sentences `keep` go
        on; once at most half the rows are live (and more than one row is held), the graph holds those alone."""
        if parents is not None:
            if self.live is None:
                self.slots.parents.copy_(parents)
            else:
                self.slots.parents.index_copy_(0, self.live, parents)
        if keep is None:
            return
        rows = self.slots.ancestry.shape[0]
        self.live = keep if self.live is None else self.live[keep]
        if self.live.shape[0] * 2 <= rows and rows > 1:
            self.compact()

    def compact(self) -> None:
        """The slots of the live rows alone, and a graph captured again for them."""
        self.slots = self.slots.rows(self.live)
        self.live = None
        self._start()

    def _replay(self) -> torch.Tensor:
        if not self.captured:
            return self.step()
        if self.graph is None:
            try:
                self._capture()
            except Exception as error:  # noqa: BLE001  a kernel that cannot be captured: the same steps, eagerly
                logger.warning_once(f"cuda_graphs: the decoder step could not be captured ({error}); run eagerly")
                self.captured = False
                return self.step()
        self.graph.replay()
        return self.output

    def _capture(self) -> None:
        """One step on a side stream (so that cuBLAS and the allocator set up outside the capture), then the step
        captured on it; the state the two moved on (paths, position) put back. Keys and values they wrote lie at
        the next position, which the next step writes before any step reads it. `torch.cuda.graph` is not used:
        it synchronizes and empties the allocator's cache at every capture, and a search captures once a batch."""
        slots = self.slots
        saved = slots.ancestry.clone(), slots.position.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(side):
                self.step()
                graph.capture_begin(capture_error_mode="thread_local")  # a server's other threads may use CUDA
                try:
                    output = self.step()
                finally:
                    graph.capture_end()
        finally:
            torch.cuda.current_stream().wait_stream(side)
            slots.ancestry.copy_(saved[0])
            slots.position.copy_(saved[1])
        self.graph, self.output = graph, output


__all__ = ["GraphedSteps", "StaticSlots"]
