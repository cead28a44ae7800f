"""The decoder steps of §6.1's search with static shapes, replayed from CUDA graphs (`generate(cuda_graphs=True)`):
on a GPU a step of a small batch is bound by the host launching its ~150 kernels one by one; a graph launches them
all at once. What a graph replays must keep its shapes and its memory, so:

- self-attention's keys and values go into slots allocated for every position up to a capacity (slot p * k + b
  for beam b's position p, as in `FoldedSearchCache`), each step's position a tensor, and each step's mask hides
  the slots not yet written as well as those off a beam's path; the encoder's keys and values and the padding bias
  are copied into buffers of a source length, the positions past a batch's source masked;
- the rows stay: a sentence that leaves the search keeps its rows in the graph (computed, never read), the
  search's live sentences mapped to them (`live`), until at most half are live, when the live rows move to a
  graph of half as many (`compact`);
- the step's inputs (the beams' last tokens and parents) are copied into buffers the graph reads.

The rows, capacity and source length are rounded up to a few sizes (`rows_bucket`, at least `MIN_ROWS`; `bucket`),
and a model keeps its graphs (`StepGraphs`, at most `StepGraphs.limit` within `memory_budget`) across searches: a
batch of the same sizes as an earlier one replays that one's graph with its own state copied in, so a long run
(`aayn translate --input`, a server) captures a graph per size met, not per batch. `forget(model)` lets them go.

`GraphedSteps` takes over a `Decoding` after its first step (which writes the encoder's keys and values): the
decoder's own step (`AaynDecoder.step`) over these buffers (`StaticSlots`, a `cache_aayn.DecoderCache`), so the
log-probabilities equal the plain search's up to float rounding (the softmaxes run over the masked slots and source
positions too). On a device without CUDA graphs the same static steps run eagerly (`replays_graphs`; tests on a CPU
check them so, and captured and replayed by an emulation of CUDA graphs). The same static step compiled by
torch.compile (`compiled_static_step`, `generate(compiled_steps=True)`) runs on any device, off CUDA on as few rows
as the sentences need. A saved folder does not carry this file (`aayn.model` says what it carries): decoding with
`cuda_graphs` or `compiled_steps` needs aayn installed.
"""

from __future__ import annotations

import threading
import weakref

import torch
from transformers.utils import logging

from ...model.cache_aayn import DecoderCache, path_bias

logger = logging.get_logger(__name__)


def replays_graphs(device: torch.device) -> bool:
    """Whether the static steps on `device` are replayed from CUDA graphs (elsewhere they run eagerly)."""
    return device.type == "cuda"


def bucket(size: int) -> int:
    """The length a static buffer holds for `size` positions: the next of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (powers
    of two and 1.5 times them), at most 1.5 times `size`."""
    power = 1
    while power < size:
        if power >= 2 and power * 3 // 2 >= size:
            return power * 3 // 2
        power *= 2
    return power


MIN_ROWS = 8  # below it a GPU's step takes about as long, and each size more is a capture more


def rows_bucket(sentences: int, least: int | None = None) -> int:
    """The rows a graph holds for `sentences`: the next power of two, at least `least` (default `MIN_ROWS`; a
    compaction halves them)."""
    return max(1 << max(sentences - 1, 0).bit_length(), MIN_ROWS if least is None else least)


def static_step(decoder, model, tokens: torch.Tensor, slots: StaticSlots, positions, dtype) -> torch.Tensor:
    """One decoder step of every row of `slots`: (rows, vocab) log-probabilities in `dtype` (what a CUDA graph
    captures, what `compiled_static_step` compiles)."""
    states = decoder.step(tokens, slots, positions)
    slots.position.add_(1)
    return model.next_log_probs(states, dtype)


_COMPILED = []  # `static_step` compiled, made at the first use


def compiled_static_step():
    """`static_step` compiled by `torch.compile` (inductor), with dynamic shapes: one graph serves every number of
    rows, capacity and source length, besides the sizes of 1 torch specializes (one sentence, one beam), and a
    model shape of its own (a graph per model shape, each compiled when its sizes first come: ~10-15 s for the demo's
    shape on 2 CPU cores). Past torch's recompile limit (`torch._dynamo.config.recompile_limit`, counted for all
    models of the process together) new sizes run eagerly."""
    with _KEPT_LOCK:
        if not _COMPILED:
            _COMPILED.append(torch.compile(static_step, dynamic=True))
        return _COMPILED[0]


class StaticSlots(DecoderCache):
    """The folded cache's self-attention with static shapes: keys and values of every position up to `capacity`
    in buffers (rows, heads, capacity * k, head_dim), each beam's path in `ancestry` (rows, k, capacity), the
    position the next step writes in the tensor `position`, the step's input `parents` (rows, k); the encoder's
    keys and values per layer (rows, heads, source, head_dim) and padding bias (rows, 1, 1, source)."""

    step_kernels = True  # its steps are a search's plain steps (`GraphedSteps` runs only where they are)

    def __init__(self, keys, values, ancestry, position, cross_keys, cross_values, padding_bias, dtype):
        self.keys, self.values, self.ancestry, self.position = keys, values, ancestry, position
        self.cross_keys, self.cross_values = cross_keys, cross_values
        self.padding_bias, self.dtype = padding_bias, dtype
        self.k, self.capacity = ancestry.shape[1], ancestry.shape[2]
        self.beam = torch.arange(self.k, device=ancestry.device)
        self.slot_position = torch.arange(self.capacity, device=ancestry.device)
        self.parents = self.beam.expand(ancestry.shape[0], -1).clone()  # (rows, k) the step's input

    @classmethod
    def like(cls, state: tuple, rows: int, capacity: int, source: int, dtype: torch.dtype) -> StaticSlots:
        """Buffers for `rows` sentences, `capacity` positions and `source` source positions, shaped as the tensors
        of `state` (what `load` takes: `state(folded)` or `rows(...)`)."""
        keys, values, ancestry, _, cross_keys, cross_values, padding_bias = state[:7]
        k = ancestry.shape[1]
        sized = lambda tensors, length: [t.new_zeros((rows, t.shape[1], length, t.shape[3])) for t in tensors]
        position = torch.zeros((), dtype=torch.long, device=ancestry.device)
        padding = padding_bias.new_empty((rows, 1, 1, source))
        return cls(sized(keys, capacity * k), sized(values, capacity * k), ancestry.new_zeros((rows, k, capacity)),
                   position, sized(cross_keys, source), sized(cross_values, source), padding, dtype)  # fmt: skip

    @staticmethod
    def state(folded) -> tuple:
        """What `load` takes, of a `FoldedSearchCache` after its first step."""
        slots, encoded = folded.slots, folded.encoded
        return (slots.keys, slots.values, slots.ancestry, slots.written, encoded.keys, encoded.values,
                folded.padding_bias)  # fmt: skip

    def load(self, keys, values, ancestry, position, cross_keys, cross_values, padding_bias, parents=None) -> None:
        """The state of n <= rows sentences put into these buffers: their keys and values per layer (n, heads,
        slots, head_dim; the first written * k slots read), `ancestry` (n, k, written), `position` (a number or a
        tensor), the encoder's keys and values per layer (n, heads, S, head_dim) and `padding_bias` (n, 1, 1, S),
        `parents` (n, k) (None: each its own). What no sentence fills is zeroed, the source positions past S
        masked: the rows past n compute finite values that nobody reads."""
        n, written = ancestry.shape[0], ancestry.shape[2]
        given = [buffer[:, :, : written * self.k] for buffer in (*keys, *values)]
        pairs = list(zip([*self.keys, *self.values], given, strict=True))
        pairs += zip([*self.cross_keys, *self.cross_values], [*cross_keys, *cross_values], strict=True)
        for target, source in pairs:
            target.zero_()
            target[:n, :, : source.shape[2]].copy_(source)
        self.ancestry.zero_()
        self.ancestry[:n, :, :written].copy_(ancestry)
        if isinstance(position, torch.Tensor):
            self.position.copy_(position)
        else:
            self.position.fill_(position)
        self.padding_bias.fill_(torch.finfo(self.padding_bias.dtype).min / 2)
        self.padding_bias[:n, :, :, : padding_bias.shape[3]].copy_(padding_bias)
        self.parents.copy_(self.beam.expand(self.parents.shape[0], -1))
        if parents is not None:
            self.parents[:n].copy_(parents)

    def rows(self, sentences: torch.LongTensor) -> tuple:
        """What `load` takes, of the rows `sentences` (the state of a search's live sentences)."""
        pick = lambda tensors: [tensor.index_select(0, sentences) for tensor in tensors]
        return (pick(self.keys), pick(self.values), self.ancestry.index_select(0, sentences), self.position,
                pick(self.cross_keys), pick(self.cross_values), self.padding_bias.index_select(0, sentences),
                self.parents.index_select(0, sentences))  # fmt: skip

    def position_encoding(self, encodings: torch.Tensor) -> torch.Tensor:
        return encodings.index_select(0, self.position[None])

    def self_attention(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Write the step's keys and values (rows, heads, k, head_dim) into their slots; return every slot."""
        slots = self.position * self.k + self.beam  # (k,)
        self.keys[layer_idx].index_copy_(2, slots, key)
        self.values[layer_idx].index_copy_(2, slots, value)
        return self.keys[layer_idx], self.values[layer_idx]

    def cross_attention(self, layer_idx: int, project) -> tuple[torch.Tensor, ...]:
        return self.cross_keys[layer_idx], self.cross_values[layer_idx]

    def layout(self, hidden_states: torch.Tensor, masks=None) -> tuple[torch.Tensor, ...]:
        """As `FoldedSearchCache.layout`, with the beams first following their `parents`: the step's input
        (rows, k, d), the self-attention bias (rows, 1, k, capacity * k: 0 on a beam's path up to the position)
        and the padding bias."""
        n, k = self.ancestry.shape[:2]
        self.ancestry.copy_(self.ancestry.gather(1, self.parents[:, :, None].expand(-1, -1, self.capacity)))
        self.ancestry.index_copy_(2, self.position[None], self.beam.expand(n, -1)[:, :, None])
        bias = path_bias(self.ancestry, self.dtype, unwritten=self.slot_position > self.position)
        return hidden_states.view(n, k, hidden_states.shape[-1]), bias, self.padding_bias


class StepGraph:
    """One size's static step: its buffers (`slots`, the step's input `tokens`, the §3.5 encodings of its
    positions) and, once captured, its CUDA graph and the graph's output. A search that holds it (`owner`) is the
    only one to use it."""

    def __init__(self, key: tuple, slots: StaticSlots, positions: torch.Tensor):
        self.key, self.slots, self.positions = key, slots, positions
        rows, k = slots.ancestry.shape[:2]
        self.tokens = torch.zeros((rows * k, 1), dtype=torch.long, device=positions.device)
        self.graph, self.output = None, None
        self.captured = replays_graphs(positions.device)  # off after a failed capture
        self.owner, self.used = None, 0
        buffers = [*slots.keys, *slots.values, *slots.cross_keys, *slots.cross_values, slots.ancestry,
                   slots.padding_bias, self.tokens, positions]  # fmt: skip
        self.bytes = sum(buffer.nbytes for buffer in buffers)  # its buffers' (the graph's own memory besides)

    def free(self) -> bool:
        return self.owner is None or self.owner() is None


def memory_budget(device: torch.device) -> int:
    """The bytes of buffers a model's kept steps may hold on `device`: an eighth of a GPU's memory (on an H200
    ~17 GiB; 256 sentences of 128 source positions, 4 beams and 192 positions of the base shape hold ~2.6 GiB in
    bf16, their halvings as much again), 2 GiB elsewhere."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory // 8
    return 2 << 30


class StepGraphs:
    """A model's static steps (`StepGraph`), kept across its searches: at most `limit`, and buffers of at most
    the budget `take` is given, the least recently used free ones let go first (when a search takes one), all of
    them once the model's weights are no longer those the graphs read (moved, cast, replaced)."""

    limit = 32

    def __init__(self):
        self.entries: list[StepGraph] = []
        self.lock, self.signature, self.clock = threading.Lock(), None, 0

    def take(self, owner, key: tuple, signature: tuple, make, budget: int) -> StepGraph:
        """A free step of `key` (made by `make()` where none is), held by `owner` until it is let go or dies;
        `budget`: the bytes the steps kept may hold."""
        with self.lock:
            if signature != self.signature:
                self.entries, self.signature = [], signature
            self.clock += 1
            entry = next((entry for entry in self.entries if entry.key == key and entry.free()), None)
            if entry is None:
                entry = make()
                self.entries.append(entry)
            entry.owner, entry.used = weakref.ref(owner), self.clock
            unused = sorted((entry for entry in self.entries if entry.free()), key=lambda entry: entry.used)
            while unused and (len(self.entries) > self.limit or sum(e.bytes for e in self.entries) > budget):
                self.entries.remove(unused.pop(0))
            return entry


_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> StepGraphs
_KEPT_LOCK = threading.Lock()


def kept_steps(model) -> StepGraphs:
    """The static steps `model` keeps (made at its first search with `cuda_graphs`)."""
    with _KEPT_LOCK:
        if model not in _KEPT:
            _KEPT[model] = StepGraphs()
        return _KEPT[model]


def forget(model) -> None:
    """Let `model`'s kept static steps and their CUDA graphs go (their memory returns to torch's allocator)."""
    with _KEPT_LOCK:
        _KEPT.pop(model, None)


class GraphedSteps:
    """A `Decoding`'s steps after its first, with static shapes, on a model's kept `StepGraph` of the batch's
    sizes, replayed from its CUDA graph (captured at its first use; elsewhere run eagerly). `log_probs` and
    `next_step` keep `Decoding`'s contract for the live sentences, whichever rows the graph holds."""

    def __init__(self, decoding, capacity: int, dtype: torch.dtype, compiled: bool = False):
        """`capacity`: the positions the search may write; `compiled`: the step compiled (`compiled_static_step`;
        off CUDA a graph then holds as few rows as the sentences need, not `MIN_ROWS`)."""
        # the decoding's model, not the decoding (which holds this): the step a search holds is free once it ends
        self.model, self.decoder, self.k = decoding.model, decoding.decoder, decoding.k
        self.dtype, self.compiled = dtype, compiled
        folded = decoding.cache
        self.least = 1 if compiled and not replays_graphs(folded.padding_bias.device) else MIN_ROWS
        self.written = folded.past_length()  # positions begun (the host's count)
        sentences, source = folded.padding_bias.shape[0], folded.padding_bias.shape[3]
        self.sizes = bucket(capacity), bucket(source)
        # the weights a graph reads (the same all search long)
        self.signature = (tuple(tensor.data_ptr() for tensor in self.model.parameters()),
                          self.model.config._attn_implementation)  # fmt: skip
        state = StaticSlots.state(folded)
        self.entry = self._take(rows_bucket(sentences, self.least), state, folded.dtype)
        self.entry.slots.load(*state)
        self._map_live(sentences, folded.padding_bias.device)

    def _map_live(self, sentences: int, device: torch.device) -> None:
        """The search's `sentences` live sentences in the first rows of the step held (`live` None: every row)."""
        rows = self.entry.slots.ancestry.shape[0]
        self.live = None if sentences == rows else torch.arange(sentences, device=device)

    @property
    def captured(self) -> bool:
        return self.entry.captured

    def _take(self, rows: int, state: tuple, dtype: torch.dtype) -> StepGraph:
        """The model's free `StepGraph` of `rows` rows and this search's sizes and dtypes, held by this search;
        one made has buffers shaped as the tensors of `state` (what `StaticSlots.load` takes)."""
        model, (capacity, source) = self.model, self.sizes
        # what a graph bakes in: autocast's casts; and tensors made in inference mode cannot be written outside it
        # (aayn's translators run in it; `generate` is called in no_grad)
        device = state[6].device  # the padding bias's
        autocast = torch.is_autocast_enabled(device.type) and torch.get_autocast_dtype(device.type)
        key = (rows, self.k, capacity, source, self.dtype, dtype, torch.is_inference_mode_enabled(), autocast)

        def make() -> StepGraph:
            slots = StaticSlots.like(state, rows, capacity, source, dtype)
            return StepGraph(key, slots, self.decoder.embed.encodings(capacity + 1, device))

        return kept_steps(model).take(self, key, self.signature, make, memory_budget(device))

    def step(self) -> torch.Tensor:
        """One decoder step of every row: (rows, vocab) log-probabilities in `dtype` (the graph's captured body)."""
        entry = self.entry
        step = compiled_static_step() if self.compiled else static_step
        return step(self.decoder, self.model, entry.tokens, entry.slots, entry.positions, self.dtype)

    def log_probs(self, history: torch.Tensor, step: int) -> torch.Tensor:
        """(live rows, vocab) log-probabilities of the next token after `history[:, :step]` (the live beams')."""
        entry = self.entry
        rows, k = entry.slots.ancestry.shape[:2]
        last = history[:, step - 1 : step]
        if self.live is None:
            entry.tokens.copy_(last)
        else:
            entry.tokens.view(rows, k).index_copy_(0, self.live, last.view(-1, k))
        output = self._replay()
        self.written += 1
        if self.live is None:  # the search changes its log-probabilities in place; a graph's output stays its own
            return output if entry.graph is None else output.clone()
        return output.view(rows, k, -1).index_select(0, self.live).view(-1, output.shape[-1])

    def next_step(self, parents: torch.LongTensor | None, keep: torch.LongTensor | None) -> None:
        """The live beams continue `parents` (m, k) (None: each its own), then only the live sentences `keep` go
        on; once at most half the rows are live, they move to a graph of half as many rows (or fewer)."""
        slots = self.entry.slots
        if parents is not None:
            if self.live is None:
                slots.parents.copy_(parents)
            else:
                slots.parents.index_copy_(0, self.live, parents)
        if keep is None:
            return
        self.live = keep if self.live is None else self.live[keep]
        if rows_bucket(self.live.shape[0], self.least) < slots.ancestry.shape[0]:
            self.compact()

    def compact(self) -> None:
        """The live rows' state moved to the model's step of as few rows as hold them; the old one let go."""
        old, live = self.entry, self.live
        state = old.slots.rows(live)
        self.entry = self._take(rows_bucket(live.shape[0], self.least), state, old.slots.dtype)
        self.entry.slots.load(*state)
        old.owner = None  # once read: another thread's search may take it then
        self._map_live(live.shape[0], live.device)

    def _replay(self) -> torch.Tensor:
        entry = self.entry
        if not entry.captured:
            return self.step()
        if entry.graph is None:
            try:
                self._capture()
            except Exception as error:  # noqa: BLE001  a kernel that cannot be captured: the same steps, eagerly
                logger.warning_once(f"cuda_graphs: the decoder step could not be captured ({error}); run eagerly")
                entry.captured = False
                return self.step()
        entry.graph.replay()
        return entry.output

    def _capture(self) -> None:
        """One step on a side stream (so that cuBLAS and the allocator set up outside the capture), then the step
        captured on it; the state the two moved on (paths, position) put back. Keys and values they wrote lie at
        the next position, which the next step writes before any step reads it. `torch.cuda.graph` is not used:
        it synchronizes and empties the allocator's cache at every capture."""
        entry, slots = self.entry, self.entry.slots
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
        entry.graph, entry.output = graph, output


__all__ = [
    "GraphedSteps",
    "StaticSlots",
    "StepGraph",
    "StepGraphs",
    "bucket",
    "compiled_static_step",
    "forget",
    "memory_budget",
    "rows_bucket",
    "static_step",
]
