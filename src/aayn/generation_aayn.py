"""§6.1 decoding for AAYN checkpoints: the paper's beam search, and how `generate()` routes to it.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 [GNMT] ... set the maximum output
length during inference to input length + 50, but terminate early when possible." The search is split as in
fairseq: `BeamSearch.step` picks the candidates of one step, `paper_search` runs the steps and keeps the books.
All bookkeeping stays in tensors, batched over sentences and beams: the host reads one small tensor per step (are
sentences done?), so a GPU is never stalled by Python loops over rows.

This file travels with every saved checkpoint (the model file imports it): it imports only torch and transformers.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F
from transformers.cache_utils import DynamicCache
from transformers.utils import ModelOutput, logging

from .ops_aayn import additive_bias, cpu_decoding_layout

logger = logging.get_logger(__name__)

# what `generate(...)` may pass to the paper's search; anything else (sampling, logits processors, ...) goes to
# transformers' own `generate`
PAPER_DECODING_ARGUMENTS = {
    "input_ids", "attention_mask", "num_beams", "length_penalty", "max_new_tokens", "max_length", "early_stopping",
    "num_return_sequences", "return_dict_in_generate", "output_scores", "use_cache", "synced_gpus", "do_sample",
}  # fmt: skip

# attention functions that take the folded layout's additive masks (FoldedSearchCache); others (flash, flex) get
# the encoder's keys once per beam
FOLDING_ATTENTION = ("sdpa", "eager")


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


class SearchCache:
    """The decoder's cache during `paper_search` for kernels that need one key row per query row (flash, flex):
    what the decoder reads of transformers' EncoderDecoderCache (`self_attention_cache.update`,
    `cross_attention_cache`, `is_updated`, `get_seq_length`), with growing in-place buffers for self-attention
    (`_GrowingKeysValues`); the encoder's keys and values, one row per beam, are computed once and kept in a
    DynamicCache."""

    def __init__(self, limit: int, beams: int = 1):
        self.self_attention_cache = _GrowingKeysValues(limit)
        self.cross_attention_cache = DynamicCache()
        self.is_updated: dict[int, bool] = {}
        self.k = beams

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.self_attention_cache.get_seq_length(layer_idx)

    def next_step(self, parents: torch.LongTensor | None, keep: torch.LongTensor | None) -> None:
        """After a step: each sentence's new beams continue its beams `parents` (n, k) (None: each its own), then
        only the sentences `keep` (m,) go on (None: all). One copy of the self-attention rows for both."""
        k, rows = self.k, None
        if parents is not None:
            rows = (parents + torch.arange(parents.shape[0], device=parents.device)[:, None] * k).view(-1)
        if keep is not None:
            kept = (keep[:, None] * k + torch.arange(k, device=keep.device)).view(-1)  # (m * k,) their beams' rows
            rows = kept if rows is None else rows[kept]
            self.cross_attention_cache.reorder_cache(kept)
        if rows is not None:
            self.self_attention_cache.reorder_cache(rows)


class _BeamSlots:
    """Self-attention keys and values of folded beams, per layer, in (sentences, heads, capacity * k, head_dim)
    buffers: position p of beam b in slot p * k + b, written once and never moved when beams are reordered. The
    buffers double as they fill, up to `limit` positions; sentences that leave the search are dropped."""

    def __init__(self, limit: int, beams: int, first_capacity: int = 32):
        self.limit, self.k, self.first_capacity = limit, beams, first_capacity
        self.keys: list[torch.Tensor] = []  # per layer
        self.values: list[torch.Tensor] = []
        self.written = 0  # positions in every layer's buffers

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int):
        """Write this step's keys and values (n, heads, k, head_dim), the beams in the place of time, into their
        slots; return all of the layer's slots so far, (n, heads, positions * k, head_dim) views."""
        k, position = self.k, self.written
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

    def keep(self, sentences: torch.LongTensor) -> None:
        """Keep the slots written so far of `sentences` only, in buffers of the same capacity."""
        end = self.written * self.k
        for buffers in (self.keys, self.values):
            for layer, buffer in enumerate(buffers):
                kept = buffer.new_empty((sentences.shape[0], *buffer.shape[1:]))
                torch.index_select(buffer[:, :, :end], 0, sentences, out=kept[:, :, :end])
                buffers[layer] = kept


class FoldedSearchCache:
    """The decoder's cache during `paper_search` where the beams of a sentence fold (sdpa and eager models): it
    stores keys, values and the masks of each step, and the model's attention computes (the decoder asks
    `step_masks()` and lays the k beams of a sentence out as its k queries, `folded_beams`).

    - Encoder-decoder attention: the encoder's keys and values once per sentence (in a DynamicCache, written at
      the first step), never copied per beam nor reordered with the beams; padding is masked by a bias built once.
    - Self-attention: keys and values in slots that never move (`_BeamSlots`); `ancestry` (sentences, k, limit)
      holds, for each live beam and position, the beam whose slot is on its path, and each step's bias masks the
      slots off a beam's path. Reordering beams (`next_step`) changes only the ancestry.
    """

    def __init__(self, limit: int, beams: int, encoder_padding: torch.Tensor, dtype: torch.dtype):
        self.limit, self.folded_beams = limit, beams
        self.self_attention_cache = _BeamSlots(limit, beams)
        self.cross_attention_cache = DynamicCache()
        self.is_updated: dict[int, bool] = {}
        blocked = (encoder_padding == 0)[:, None, None, :]  # (n, 1, 1, S)
        self.padding_bias = additive_bias(blocked, dtype)
        self.ancestry = encoder_padding.new_zeros((encoder_padding.shape[0], beams, limit), dtype=torch.long)
        self.dtype = dtype

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.self_attention_cache.written

    def step_masks(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The additive masks of this step's self-attention (n, 1, k, positions * k: 0 on a beam's own path) and
        encoder-decoder attention (n, 1, 1, S: 0 on the source's tokens)."""
        k, position = self.folded_beams, self.self_attention_cache.written
        if k == 1:
            return None, self.padding_bias  # one beam: every slot is on its path
        beam = torch.arange(k, device=self.ancestry.device)
        self.ancestry[:, :, position] = beam  # each beam's own slot at the new position
        off_path = self.ancestry[:, :, : position + 1, None] != beam  # (n, k, positions, k)
        path_bias = additive_bias(off_path, self.dtype).view(-1, 1, k, (position + 1) * k)
        return path_bias, self.padding_bias

    def next_step(self, parents: torch.LongTensor | None, keep: torch.LongTensor | None) -> None:
        """After a step: each sentence's new beams continue its beams `parents` (n, k) (None: each its own), then
        only the sentences `keep` (m,) go on (None: all). Beams only change their ancestry; no key or value moves
        unless sentences leave."""
        slots = self.self_attention_cache
        slots.written += 1
        if parents is not None:
            self.ancestry = self.ancestry.gather(1, parents[:, :, None].expand(-1, -1, self.limit))
        if keep is not None:
            slots.keep(keep)
            self.ancestry, self.padding_bias = self.ancestry[keep], self.padding_bias[keep]
            self.cross_attention_cache.reorder_cache(keep)


def gnmt_length_penalty(length: torch.Tensor | int, alpha: float) -> torch.Tensor | float:
    """lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016), |Y| counting eos; transformers' penalty is |Y|^alpha."""
    return ((5 + length) / 6) ** alpha


class BeamSearch:
    """One step of §6.1's search for n sentences of k beams (fairseq's `search.BeamSearch.step`).

    From the live beams' scores and the next-token log-probabilities, the 2k best candidates per sentence by
    log P: among the first k, those ending in eos finish (fairseq's rule); the best k of the others live on.
    """

    def __init__(self, num_beams: int, eos_token_id: int):
        self.k, self.eos = num_beams, eos_token_id

    def step(self, scores: torch.Tensor, log_probs: torch.Tensor):
        """scores (n, k), log_probs (n, k, vocab) -> the 2k candidates' values, beams, words, each (n, 2k)."""
        n, k, vocab = log_probs.shape
        candidates = (scores[:, :, None] + log_probs).view(n, k * vocab)  # (n, k * vocab)
        values, indices = candidates.topk(2 * k, dim=-1)
        return values, indices // vocab, indices % vocab

    def live_on(self, values: torch.Tensor, beams: torch.Tensor, words: torch.Tensor):
        """The k best candidates that do not end in eos: their scores (-inf where fewer exist), beams and words."""
        k = self.k
        go_on = words != self.eos
        go_on &= go_on.cumsum(-1) <= k
        slots = torch.arange(2 * k, device=values.device).expand_as(values)
        order = torch.where(go_on, slots, 2 * k).argsort(dim=-1, stable=True)[:, :k]  # (n, k), in candidate order
        scores = values.gather(1, order).masked_fill(~go_on.gather(1, order), -math.inf)
        return scores, beams.gather(1, order), words.gather(1, order)


@torch.no_grad()
def paper_search(
    model,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor,
    *,
    num_beams: int,
    alpha: float,
    max_new_tokens: torch.Tensor,
    num_return_sequences: int = 1,
) -> tuple[torch.LongTensor, torch.Tensor]:
    """Beam search with GNMT's length penalty and a length limit per sentence; `num_beams=1` is greedy decoding
    (the likeliest token at each step until eos, as tensor2tensor, the paper's code, decodes with beam size 1).

    A sentence is done once the hypotheses it returns (its `num_return_sequences` best finished ones) all score
    at least what its best live beam could still reach (log P / lp(limit): log P only falls and lp only grows),
    or at its limit, where eos is the only choice. With one returned hypothesis this is tensor2tensor's rule (the
    paper's code, `stop_early=True`): no live beam can beat the best finished one, so the search returns what
    running to the limit would; the k-th finished one need not be known.
    Done sentences leave the batch and the caches (fairseq's way). With sdpa or eager attention (the default) the
    beams of a sentence fold (`FoldedSearchCache`): the encoder's keys and values are kept once per sentence, and
    no cached key or value is copied when beams are reordered. Returns the `num_return_sequences` best
    hypotheses per sentence (start token, tokens, eos, padding) and their scores log P / lp(|Y|).
    """
    if num_return_sequences > num_beams:
        raise ValueError(f"num_return_sequences={num_return_sequences} cannot exceed num_beams={num_beams}")
    config, device = model.config, input_ids.device
    batch, k, eos, pad = input_ids.shape[0], num_beams, config.eos_token_id, config.pad_token_id
    search, returned = BeamSearch(k, eos), num_return_sequences
    dtype = torch.promote_types(model.lm_head.weight.dtype, torch.float32)  # the model's float32 (or float64)
    limits = max_new_tokens.to(device)  # (batch,)
    shortest, longest = torch.stack(limits.aminmax()).tolist()  # the one host read before the loop
    hidden = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (n, S, d)
    implementation = model.config._attn_implementation
    fold = implementation in FOLDING_ATTENTION
    if not fold:  # kernels that need one key row per query row: the encoder output per beam
        hidden, attention_mask = hidden.repeat_interleave(k, 0), attention_mask.repeat_interleave(k, 0)
    decoder = model.get_decoder()
    cross_mask = None if fold else attention_mask  # where beams fold, the cache masks padding itself
    cache = FoldedSearchCache(longest, k, attention_mask, hidden.dtype) if fold else SearchCache(longest, k)

    sentence = torch.arange(batch, device=device)  # the original index of each sentence still searched
    scores = torch.full((batch, k), -math.inf, dtype=dtype, device=device)
    scores[:, 0] = 0.0  # one live beam at the start, so the first step does not pick the same token k times
    history = torch.full((batch * k, longest + 1), pad, dtype=torch.long, device=device)
    history[:, 0] = config.decoder_start_token_id
    finished = torch.full((batch, k), -math.inf, dtype=dtype, device=device)  # normalized scores, best first
    finished_tokens = torch.full((batch, k, longest + 1), pad, dtype=torch.long, device=device)
    best = torch.full(
        (batch, k), -math.inf, dtype=dtype, device=device
    )  # per original sentence, filled as sentences finish
    best_tokens = finished_tokens.clone()
    not_eos = torch.arange(config.decoder_vocab_size, device=device) != eos  # (vocab,), built once
    for step in range(1, longest + 1):
        n = sentence.shape[0]
        embeds = decoder.embed.embed_tokens(history[:, step - 1 : step])  # ids from this search: no range check
        states, _, _, _ = decoder(None, hidden, None, cross_mask, past_key_values=cache, inputs_embeds=embeds)
        log_probs = F.log_softmax(model._output_logits(states[:, -1]).to(dtype), dim=-1).view(n, k, -1)
        at_limit = step >= limits  # (n,): eos is the only choice
        if step >= shortest:  # before, no sentence is at its limit
            log_probs = torch.where(at_limit[:, None, None] & not_eos, -math.inf, log_probs)
        parents = None  # the beams the new beams continue: the cache learns them after the step's host read
        if k == 1:  # greedy, as tensor2tensor decodes with beam size 1: the likeliest token; eos ends it
            value, word = log_probs[:, 0].max(dim=-1)  # (n,)
            scores = scores + value[:, None]
            history[:, step] = word
            done = word == eos  # at the limit eos is the only choice
            finished = torch.where(done[:, None], scores / gnmt_length_penalty(step, alpha), finished)
            finished_tokens = torch.where(done[:, None, None], history[:, None], finished_tokens)
        else:
            values, beams, words = search.step(scores, log_probs)
            # candidates among the first k that end in eos join the finished ones (top k by normalized score)
            ending = (words[:, :k] == eos) & torch.isfinite(values[:, :k])
            rows = (beams[:, :k] + torch.arange(n, device=device)[:, None] * k).view(-1)
            ended_tokens = history[rows].view(n, k, -1)  # (n, k, L), a copy (indexing by a tensor)
            ended_tokens[:, :, step] = eos
            ended = torch.where(ending, values[:, :k] / gnmt_length_penalty(step, alpha), -math.inf)
            finished, pick = torch.cat([finished, ended], 1).topk(k, dim=-1)  # (n, k), best first
            finished_tokens = torch.cat([finished_tokens, ended_tokens], 1).gather(
                1, pick[:, :, None].expand(-1, -1, finished_tokens.shape[-1])
            )
            scores, beams, words = search.live_on(values, beams, words)
            reachable = scores.max(-1).values / gnmt_length_penalty(limits, alpha)
            done = at_limit | (finished[:, returned - 1] >= reachable)  # (n,)
            parents = beams
            history = history[(beams + torch.arange(n, device=device)[:, None] * k).view(-1)]
            history[:, step] = words.view(-1)

        flags = done.tolist()  # the one host read of the step; the indices below are built from it on the host
        keep = None
        if any(flags):
            ended = torch.tensor([i for i, flag in enumerate(flags) if flag], device=device)
            best[sentence[ended]], best_tokens[sentence[ended]] = finished[ended], finished_tokens[ended]
            if all(flags):
                break
            keep = torch.tensor([i for i, flag in enumerate(flags) if not flag], device=device)  # (m,)
            kept = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)  # (m * k,) their beams' rows
            sentence, scores, limits = sentence[keep], scores[keep], limits[keep]
            finished, finished_tokens, history = finished[keep], finished_tokens[keep], history[kept]
            per_sentence = keep if fold else kept
            hidden = hidden[per_sentence]
            cross_mask = cross_mask[per_sentence] if cross_mask is not None else None
        cache.next_step(parents, keep)

    sequences = best_tokens[:, :returned].reshape(batch * returned, -1)
    width = int((sequences != pad).sum(-1).max())
    sequences = sequences[:, :width]
    return sequences, best[:, :returned].reshape(-1)


def generate(model, inputs, generation_config, paper_decoding, parent_generate, **kwargs):
    """`AaynForConditionalGeneration.generate`: §6.1's search unless `paper_decoding=False` (or
    `config.paper_decoding` is off); sampling and options it does not take go to transformers' `generate`."""
    config = model.generation_config if generation_config is None else generation_config
    paper = model.config.paper_decoding if paper_decoding is None else paper_decoding
    kwargs.pop("labels", None)  # Seq2SeqTrainer's predict_with_generate passes them along
    others = set(kwargs) - PAPER_DECODING_ARGUMENTS
    with cpu_decoding_layout(model):
        if not paper or kwargs.get("do_sample", config.do_sample) or others:
            if paper and others:
                logger.warning_once(f"paper decoding does not take {sorted(others)}; using transformers' generate")
            return parent_generate(inputs, generation_config=generation_config, **kwargs)
        input_ids = inputs if inputs is not None else kwargs["input_ids"]
        attention_mask = kwargs.get("attention_mask")
        if attention_mask is None:
            attention_mask = (input_ids != model.config.pad_token_id).long()
        limits = attention_mask.sum(-1) + 50
        if kwargs.get("max_new_tokens") is not None:
            limits = limits.clamp(max=kwargs["max_new_tokens"])
        elif kwargs.get("max_length") is not None:
            limits = limits.clamp(max=kwargs["max_length"] - 1)  # transformers counts the decoder start token
        sequences, scores = paper_search(
            model,
            input_ids,
            attention_mask,
            # a generation config written by 4.57 leaves out values at 4.57's defaults, which 5.x reads as None
            num_beams=kwargs.get("num_beams") or config.num_beams or 1,
            alpha=next(a for a in (kwargs.get("length_penalty"), config.length_penalty, 1.0) if a is not None),
            max_new_tokens=limits,
            num_return_sequences=kwargs.get("num_return_sequences") or config.num_return_sequences or 1,
        )
    if kwargs.get("return_dict_in_generate", config.return_dict_in_generate):
        return ModelOutput(sequences=sequences, sequences_scores=scores)
    return sequences
