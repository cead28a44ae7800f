"""The decoder's caches: one protocol (`DecoderCache`) that every key/value store implements, and the stores.

`DecoderCache` is all the decoder's attention asks of a cache: how the step is laid out and masked (`layout`), the
positions stored before it (`past_length`, `position_encoding`), self-attention's keys and values with this step's
(`self_attention`) and the encoder's, projected once (`cross_attention`), and the kernel that attends
(`attention_kernel`: a search's steps in eval name one of `ops_aayn.STEP_ATTENTION`, the rest none). The base
class is no cache at all (training, the encoder); transformers' `EncoderDecoderCache`, which transformers' own
`generate` hands the model, is read through `TransformersCache`. §6.1's search has two families of its own:

- `FoldedSearchCache` (sdpa and eager models, the default): the k beams of a sentence fold into its k queries;
  the encoder's keys and values are kept once per sentence, self-attention keys and values in slots that never
  move, and each step's masks say which slots are on a beam's path.
- `SearchCache` (kernels that need one key row per query row: flash, flex): growing in-place buffers, reordered
  with the beams.

Both drop the sentences that leave the search and follow the beams' parents in one call (`next_step`); the static
buffers of the graphed steps (`aayn.formats.aayn.cuda_graphs.StaticSlots`, in the installed package) implement the same
protocol. This file travels with every saved checkpoint (the model imports it): it imports only torch and transformers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .ops_aayn import STEP_ATTENTION, additive_bias

# attention functions that take the folded layout's additive masks (FoldedSearchCache); others (flash, flex) get
# the encoder's keys once per beam
FOLDING_ATTENTION = ("sdpa", "eager")

Masks = tuple[torch.Tensor | None, torch.Tensor | None]


class DecoderCache:
    """What the decoder's attention asks of a cache, the same for every store; this base keeps nothing (every key
    and value computed anew: training, the encoder)."""

    # set where every step computes what the configured attention computes in eval with no weights recorded (a
    # search's steps, `decoding_aayn.plain_steps`): the attention then calls its kernel of `STEP_ATTENTION` itself
    step_kernels = False

    def attention_kernel(self, implementation: str):
        """`(module, query, key, value, additive mask or None) -> output` for the attention to call instead of
        the configured function through transformers' interface, or None (that function)."""
        return STEP_ATTENTION.get(implementation) if self.step_kernels else None

    def past_length(self) -> int:
        """The positions stored before this step."""
        return 0

    def position_encoding(self, encodings: torch.Tensor) -> torch.Tensor:
        """(1, d_model): the row of `encodings` (§3.5, one row a position) of the position this step writes."""
        past = self.past_length()
        return encodings[past : past + 1]

    def layout(self, hidden_states: torch.Tensor, masks: Callable[[], Masks]) -> tuple[torch.Tensor, ...]:
        """The step's embedded input as the layers read it, then the masks of self-attention and encoder-decoder
        attention; `masks()` builds the usual ones (from the padding masks, a row per query)."""
        return (hidden_states, *masks())

    def self_attention(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Self-attention's keys and values of layer `layer_idx` (B, nh, positions, hs), this step's (B, nh, T, hs)
        after those stored."""
        return key, value

    def cross_attention(self, layer_idx: int, project: Callable[[], tuple]) -> tuple[torch.Tensor, ...]:
        """The encoder's keys and values of layer `layer_idx`: `project()` computes them; a cache keeps them from
        its first step."""
        return project()

    def observe_cross(self, attention, query: torch.Tensor, key: torch.Tensor, mask) -> None:
        """Called by every encoder-decoder attention with its query, keys and mask (the search's alignments)."""


NO_CACHE = DecoderCache()


class TransformersCache(DecoderCache):
    """transformers' `EncoderDecoderCache` (what its `generate` passes) read through the protocol."""

    def __init__(self, cache):
        self.cache = cache

    def past_length(self) -> int:
        return self.cache.get_seq_length()

    def self_attention(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.cache.self_attention_cache.update(key, value, layer_idx)

    def cross_attention(self, layer_idx: int, project: Callable[[], tuple]) -> tuple[torch.Tensor, ...]:
        if self.cache.is_updated.get(layer_idx):
            layer = self.cache.cross_attention_cache.layers[layer_idx]
            return layer.keys, layer.values
        key, value = project()  # read at every step after this one: contiguous
        key, value = self.cache.cross_attention_cache.update(key.contiguous(), value.contiguous(), layer_idx)
        self.cache.is_updated[layer_idx] = True
        return key, value


def decoder_cache(past_key_values) -> DecoderCache:
    """The protocol over what the decoder was given: one of its own, transformers' cache, or none."""
    if past_key_values is None:
        return NO_CACHE
    # by its methods, not its class: the static steps' cache derives from the installed package's copy of this file,
    # which is another class than a folder's remote-code copy
    return past_key_values if hasattr(past_key_values, "cross_attention") else TransformersCache(past_key_values)


class _EncoderKeysValues:
    """The encoder's keys and values per layer, projected at a search's first step (contiguous: every later step
    reads them)."""

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def get(self, layer_idx: int, project: Callable[[], tuple]) -> tuple[torch.Tensor, torch.Tensor]:
        if layer_idx == len(self.keys):
            key, value = project()
            self.keys.append(key.contiguous())
            self.values.append(value.contiguous())
        return self.keys[layer_idx], self.values[layer_idx]

    def keep(self, rows: torch.LongTensor) -> None:
        self.keys = [tensor.index_select(0, rows) for tensor in self.keys]
        self.values = [tensor.index_select(0, rows) for tensor in self.values]


def path_bias(ancestry: torch.Tensor, dtype: torch.dtype, unwritten: torch.Tensor | None = None) -> torch.Tensor:
    """Self-attention's additive bias over folded beams' slots (n, 1, k, positions * k): 0 where slot p * k + b is
    on a beam's path (`ancestry` (n, k, positions): the beam whose slot each beam's position p reads), and, with
    `unwritten` (positions,), also blocked at the positions it marks."""
    n, k, positions = ancestry.shape
    off_path = ancestry[:, :, :, None] != torch.arange(k, device=ancestry.device)  # (n, k, positions, k)
    if unwritten is not None:
        off_path |= unwritten[None, None, :, None]
    return additive_bias(off_path, dtype).view(n, 1, k, positions * k)


class _GrowingKeysValues:
    """Self-attention keys and values of a search, per layer, in buffers of (rows, heads, capacity, head_dim)
    that double as they fill (up to `limit` positions): a step writes its position in place instead of copying
    every cached position into a new tensor (`torch.cat`, as transformers' DynamicCache does), and a beam reorder
    gathers only the positions written, into a spare buffer that then takes the place of the first."""

    def __init__(self, limit: int, first_capacity: int = 32):
        self.limit, self.first_capacity = limit, first_capacity
        self.buffers: list[list[torch.Tensor]] = []  # per layer: [keys, values]
        self.spares: list[list[torch.Tensor] | None] = []
        self.filled: list[int] = []

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.filled[layer_idx] if layer_idx < len(self.filled) else 0

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int):
        """Append key/value (rows, heads, T, head_dim); return all of the layer's positions so far (views)."""
        if layer_idx == len(self.buffers):
            self.buffers.append([self._empty(key, 0), self._empty(value, 0)])
            self.spares.append(None)
            self.filled.append(0)
        start = self.filled[layer_idx]
        end = start + key.shape[2]
        if end > self.buffers[layer_idx][0].shape[2]:
            self.buffers[layer_idx] = [self._grown(buffer, start, end) for buffer in self.buffers[layer_idx]]
            self.spares[layer_idx] = None
        keys, values = self.buffers[layer_idx]
        keys[:, :, start:end] = key
        values[:, :, start:end] = value
        self.filled[layer_idx] = end
        return keys[:, :, :end], values[:, :, :end]

    def reorder_cache(self, rows: torch.LongTensor) -> None:
        """Keep `rows` (beams living on, or the beams of sentences still searched), in that order."""
        for layer, end in enumerate(self.filled):
            same_rows = rows.shape[0] == self.buffers[layer][0].shape[0]
            spares = self.spares[layer] if same_rows else None
            if spares is None:
                spares = [buffer.new_empty((rows.shape[0], *buffer.shape[1:])) for buffer in self.buffers[layer]]
            for buffer, spare in zip(self.buffers[layer], spares):
                torch.index_select(buffer[:, :, :end], 0, rows, out=spare[:, :, :end])
            self.buffers[layer], self.spares[layer] = spares, (self.buffers[layer] if same_rows else None)

    def _empty(self, like: torch.Tensor, filled: int) -> torch.Tensor:
        capacity = min(self.limit, max(self.first_capacity, 2 * filled))
        return like.new_empty((like.shape[0], like.shape[1], capacity, like.shape[3]))

    def _grown(self, buffer: torch.Tensor, filled: int, needed: int) -> torch.Tensor:
        if needed > self.limit:
            raise ValueError(f"the search cache holds {self.limit} positions; step {needed} is beyond them")
        grown = buffer.new_empty(
            (*buffer.shape[:2], min(self.limit, max(needed, 2 * buffer.shape[2])), buffer.shape[3])
        )
        grown[:, :, :filled] = buffer[:, :, :filled]
        return grown


class SearchCache(DecoderCache):
    """The decoder's cache during `paper_search` for kernels that need one key row per query row (flash, flex):
    growing in-place buffers for self-attention (`_GrowingKeysValues`); the encoder's keys and values, one row per
    beam, projected at the first step. The decoder builds its usual masks (`layout`)."""

    def __init__(self, limit: int, beams: int = 1):
        self.keys_values = _GrowingKeysValues(limit)
        self.encoded = _EncoderKeysValues()
        self.k = beams

    def past_length(self) -> int:
        return self.keys_values.get_seq_length()

    def self_attention(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.keys_values.update(key, value, layer_idx)

    def cross_attention(self, layer_idx: int, project: Callable[[], tuple]) -> tuple[torch.Tensor, ...]:
        return self.encoded.get(layer_idx, project)

    def next_step(self, parents: torch.LongTensor | None, keep: torch.LongTensor | None) -> None:
        """After a step: each sentence's new beams continue its beams `parents` (n, k) (None: each its own), then
        only the sentences `keep` (m,) go on (None: all). One copy of the self-attention rows for both."""
        k, rows = self.k, None
        if parents is not None:
            rows = (parents + torch.arange(parents.shape[0], device=parents.device)[:, None] * k).view(-1)
        if keep is not None:
            kept = (keep[:, None] * k + torch.arange(k, device=keep.device)).view(-1)  # (m * k,) their beams' rows
            rows = kept if rows is None else rows[kept]
            self.encoded.keep(kept)
        if rows is not None:
            self.keys_values.reorder_cache(rows)


class _BeamSlots:
    """Self-attention keys and values of folded beams, per layer, in (sentences, heads, capacity * k, head_dim)
    buffers: position p of beam b in slot p * k + b, written once and never moved when beams are reordered. The
    buffers double as they fill, up to `limit` positions; sentences that leave the search are dropped.
    `ancestry` (sentences, k, positions) holds, for each live beam and position, the beam whose slot is on its path;
    its length is the positions begun: a tensor's size, which a compiled decoder traces as a dynamic size, where a
    Python number would be a constant of the graph (a graph per position, up to torch's recompile limit)."""

    def __init__(self, limit: int, beams: int, sentences: int, device: torch.device, first_capacity: int = 32):
        self.limit, self.k, self.first_capacity = limit, beams, first_capacity
        self.keys: list[torch.Tensor] = []  # per layer
        self.values: list[torch.Tensor] = []
        self.ancestry = torch.zeros((sentences, beams, 0), dtype=torch.long, device=device)

    @property
    def written(self) -> int:
        """Positions begun: every layer's buffers hold them once the step's layers have run."""
        return self.ancestry.shape[2]

    def begin_step(self) -> None:
        """A new position: each beam's own slot there is on its path."""
        own = torch.arange(self.k, device=self.ancestry.device).expand(self.ancestry.shape[0], -1)[:, :, None]
        self.ancestry = torch.cat([self.ancestry, own], 2)

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int):
        """Write this step's keys and values (n, heads, k, head_dim), the beams in the place of time, into their
        slots; return all of the layer's slots so far, (n, heads, positions * k, head_dim) views."""
        k, position = self.k, self.written - 1
        if layer_idx == len(self.keys):  # the first step
            shape = (*key.shape[:2], min(self.limit, self.first_capacity) * k, key.shape[3])
            self.keys.append(key.new_empty(shape))
            self.values.append(value.new_empty(shape))
        end = (position + 1) * k
        if end > self.keys[layer_idx].shape[2]:
            if position >= self.limit:
                raise ValueError(f"the search cache holds {self.limit} positions; step {position + 1} is beyond them")
            self.keys[layer_idx], self.values[layer_idx] = (
                self._grown(buffer, position * k) for buffer in (self.keys[layer_idx], self.values[layer_idx])
            )
        self.keys[layer_idx][:, :, position * k : end] = key
        self.values[layer_idx][:, :, position * k : end] = value
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]

    def _grown(self, buffer: torch.Tensor, filled: int) -> torch.Tensor:
        capacity = min(self.limit, 2 * buffer.shape[2] // self.k) * self.k
        grown = buffer.new_empty((*buffer.shape[:2], capacity, buffer.shape[3]))
        grown[:, :, :filled] = buffer[:, :, :filled]
        return grown

    def follow(self, parents: torch.LongTensor) -> None:
        """Each sentence's new beams continue its beams `parents` (n, k): they take over their paths."""
        self.ancestry = self.ancestry.gather(1, parents[:, :, None].expand(-1, -1, self.ancestry.shape[2]))

    def keep(self, sentences: torch.LongTensor) -> None:
        """Keep the slots written so far of `sentences` only, in buffers of the same capacity."""
        end = self.written * self.k
        for buffers in (self.keys, self.values):
            for layer, buffer in enumerate(buffers):
                kept = buffer.new_empty((sentences.shape[0], *buffer.shape[1:]))
                torch.index_select(buffer[:, :, :end], 0, sentences, out=kept[:, :, :end])
                buffers[layer] = kept
        self.ancestry = self.ancestry[sentences]


class FoldedSearchCache(DecoderCache):
    """The decoder's cache during `paper_search` where the beams of a sentence fold (sdpa and eager models): it
    stores keys, values and the masks of each step, and lays the step out (`layout`: the k beams of a sentence as
    its k queries, and the step's masks).

    - Encoder-decoder attention: the encoder's keys and values once per sentence (written at the first step),
      never copied per beam nor reordered with the beams; padding is masked by a bias built once.
    - Self-attention: keys and values in slots that never move (`_BeamSlots`), with each live beam's path
      through them (its `ancestry`): each step's bias masks the slots off a beam's path. Reordering beams
      (`next_step`) changes only the paths.
    """

    def __init__(self, limit: int, beams: int, encoder_padding: torch.Tensor, dtype: torch.dtype):
        self.folded_beams = beams
        self.slots = _BeamSlots(limit, beams, encoder_padding.shape[0], encoder_padding.device)
        self.encoded = _EncoderKeysValues()
        blocked = (encoder_padding == 0)[:, None, None, :]  # (n, 1, 1, S)
        self.padding_bias = additive_bias(blocked, dtype)
        self.dtype = dtype
        self.record_cross = None  # the search's alignments: `decoding_aayn.CrossAttentionRecorder`, when asked

    def past_length(self) -> int:
        return self.slots.written

    def layout(self, hidden_states: torch.Tensor, masks=None) -> tuple[torch.Tensor, ...]:
        """The step (which this begins): its input (n * k, 1, d) laid out with a sentence's k beams as its k
        queries (n, k, d), and the additive masks of self-attention (n, 1, k, positions * k: 0 on a beam's own
        path) and encoder-decoder attention (n, 1, 1, S: 0 on the source's tokens)."""
        slots, k = self.slots, self.folded_beams
        slots.begin_step()
        folded = hidden_states.view(-1, k, hidden_states.shape[-1])
        if k == 1:
            return folded, None, self.padding_bias  # one beam: every slot is on its path
        return folded, path_bias(slots.ancestry, self.dtype), self.padding_bias

    def self_attention(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.slots.update(key, value, layer_idx)

    def cross_attention(self, layer_idx: int, project: Callable[[], tuple]) -> tuple[torch.Tensor, ...]:
        return self.encoded.get(layer_idx, project)

    def observe_cross(self, attention, query: torch.Tensor, key: torch.Tensor, mask) -> None:
        if self.record_cross is not None:
            self.record_cross(attention, query, key, mask)

    def next_step(self, parents: torch.LongTensor | None, keep: torch.LongTensor | None) -> None:
        """After a step: each sentence's new beams continue its beams `parents` (n, k) (None: each its own), then
        only the sentences `keep` (m,) go on (None: all). Beams only change their paths; no key or value moves
        unless sentences leave."""
        if parents is not None:
            self.slots.follow(parents)
        if keep is not None:
            self.slots.keep(keep)
            self.padding_bias = self.padding_bias[keep]
            self.encoded.keep(keep)
