"""§6.1 decoding for AAYN checkpoints: the paper's beam search, and how `generate()` routes to it.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6 [GNMT] ... set the maximum output
length during inference to input length + 50, but terminate early when possible." The search is split as in
fairseq: `BeamSearch.step` picks the candidates of one step, `paper_search` runs the steps and keeps the books.
All bookkeeping stays in tensors, batched over sentences and beams: the host reads one small tensor per step (are
sentences done?), so a GPU is never stalled by Python loops over rows.

This file travels with every saved checkpoint (the model file imports it): it imports only torch and transformers.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerateBeamEncoderDecoderOutput
from transformers.utils import logging

from .ops_aayn import additive_bias, cpu_decoding_layout

logger = logging.get_logger(__name__)

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


@dataclass
class SearchSettings:
    """What `paper_search` is asked to do; `generate` builds it from its arguments and the generation config."""

    num_beams: int
    alpha: float  # GNMT's length penalty exponent (`length_penalty`)
    eos: int
    pad: int
    start: int
    returned: int = 1  # num_return_sequences
    min_step: int = 1  # eos may end a hypothesis from this step on (min_length, min_new_tokens)
    no_repeat_ngram_size: int = 0
    bad_words_ids: tuple = ()
    early_stopping: bool | str = "never"  # "never": the exact rule; True / False: transformers' meanings
    use_cache: bool = True
    synced_gpus: bool = False
    ensemble_average: str = "log_probs"  # how an ensemble combines its models (`ensemble_log_probs`)


class TokenRules:
    """The tokens a hypothesis may not take next, as masks on the step's log-probabilities (tensors only, no host
    read): pad (fairseq's rule; unless pad is eos), `bad_words_ids` and `no_repeat_ngram_size` as transformers'
    logits processors define them (over the decoder's tokens, its start token included), and eos before
    `min_step` (except at a sentence's limit, where eos is the only choice)."""

    def __init__(self, settings: SearchSettings, device: torch.device):
        self.settings = settings
        single = {words[0] for words in settings.bad_words_ids if len(words) == 1}
        if settings.pad != settings.eos:
            single.add(settings.pad)
        self.banned = torch.tensor(sorted(single), dtype=torch.long, device=device)
        self.sequences = [
            (torch.tensor(words[:-1], device=device), words[-1]) for words in settings.bad_words_ids if len(words) > 1
        ]

    def apply(self, log_probs: torch.Tensor, history: torch.Tensor, step: int, at_limit: torch.Tensor):
        """log_probs (n, k, vocab) of the hypotheses `history[:, :step]` (n * k rows), changed in place."""
        settings, (n, k, vocab) = self.settings, log_probs.shape
        log_probs.index_fill_(-1, self.banned, -math.inf)
        rows = log_probs.view(n * k, vocab)
        for prefix, word in self.sequences:
            if step >= prefix.shape[0]:
                follows = (history[:, step - prefix.shape[0] : step] == prefix).all(-1)  # (n * k,)
                rows[:, word].masked_fill_(follows, -math.inf)
        size = settings.no_repeat_ngram_size
        if size and step >= size:
            seen = history[:, :step].unfold(1, size, 1)  # (rows, windows, size): every n-gram so far
            repeats = (seen[:, :, :-1] == history[:, None, step - size + 1 : step]).all(-1)  # ends as the hypothesis
            counts = torch.zeros_like(rows).scatter_add_(1, seen[:, :, -1], repeats.to(rows.dtype))
            rows.masked_fill_(counts > 0, -math.inf)
        if step < settings.min_step:
            eos = settings.eos
            log_probs[:, :, eos] = log_probs[:, :, eos].masked_fill(~at_limit[:, None], -math.inf)
        return log_probs


@torch.no_grad()
def paper_search(
    model,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor,
    max_new_tokens: torch.Tensor,
    settings,
    prefix: torch.LongTensor | None = None,
) -> tuple[torch.LongTensor, torch.Tensor]:
    """Beam search with GNMT's length penalty and a length limit per sentence (`max_new_tokens`, (batch,));
    `num_beams=1` is greedy decoding (the likeliest token at each step until eos, as tensor2tensor, the paper's
    code, decodes with beam size 1).

    A sentence is done once the hypotheses it returns (its `returned` best finished ones) all score at least what
    its best live beam could still reach (log P only falls; lp is largest at the limit, or for a negative alpha at
    the shortest length still possible), or at its limit, where eos is the only choice. With one returned
    hypothesis this is tensor2tensor's rule (the paper's code, `stop_early=True`): the search returns what running
    to the limit would. `early_stopping=True` / `False` give transformers' rules instead (stop at k finished
    hypotheses / when the best live beam at its current length cannot beat the k-th).
    Done sentences leave the batch and the caches (fairseq's way). With sdpa or eager attention (the default) the
    beams of a sentence fold (`FoldedSearchCache`): the encoder's keys and values are kept once per sentence, and
    no cached key or value is copied when beams are reordered. Without the cache (`use_cache=False`) every step
    runs the decoder over the whole hypothesis. Under `synced_gpus` every process runs decoder steps until the
    sentences of all processes are done (a sharded model's forward is a collective).
    `prefix` (batch, P), -1 after a row's end, forces each sentence's first tokens (a target prefix): at those
    steps the prefix token is the only choice, and its log-probability counts in the score like any other token's.
    Returns the `returned` best hypotheses per sentence (start token, tokens, eos, padding after eos) and their
    scores log P / lp(|Y|).
    """
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    device, s = input_ids.device, settings
    batch, k, eos, pad, returned = input_ids.shape[0], s.num_beams, s.eos, s.pad, s.returned
    search, rules = BeamSearch(k, eos), TokenRules(s, device)
    dtype = torch.promote_types(models[0].lm_head.weight.dtype, torch.float32)  # the model's float32 (or float64)
    limits = max_new_tokens.to(device)  # (batch,)
    shortest, longest = torch.stack(limits.aminmax()).tolist()  # the one host read before the loop
    parts = [_ModelDecoding(m, input_ids, attention_mask, k, longest, s) for m in models]

    sentence = torch.arange(batch, device=device)  # the original index of each sentence still searched
    scores = torch.full((batch, k), -math.inf, dtype=dtype, device=device)
    scores[:, 0] = 0.0  # one live beam at the start, so the first step does not pick the same token k times
    history = torch.full((batch * k, longest + 1), pad, dtype=torch.long, device=device)
    history[:, 0] = s.start
    finished = torch.full((batch, k), -math.inf, dtype=dtype, device=device)  # normalized scores, best first
    finished_tokens = torch.full((batch, k, longest + 1), pad, dtype=torch.long, device=device)
    finished_lengths = torch.zeros((batch, k), dtype=torch.long, device=device)  # tokens after the start
    best = torch.full((batch, k), -math.inf, dtype=dtype, device=device)  # per original sentence, as they finish
    best_tokens, best_lengths = finished_tokens.clone(), finished_lengths.clone()
    not_eos = torch.arange(models[0].config.decoder_vocab_size, device=device) != eos  # (vocab,), built once
    step, searching = 0, batch > 0
    while True:
        step += 1
        if not searching:  # synced_gpus: this process's sentences are done, others' are not
            for part in parts:
                part.idle_step()
        else:
            n = sentence.shape[0]
            if len(parts) == 1:
                log_probs = parts[0].log_probs(history, step, dtype).view(n, k, -1)
            else:  # an ensemble: each model's log-probabilities, combined (see `ensemble_log_probs`)
                each = [part.log_probs(history, step, dtype) for part in parts]
                log_probs = ensemble_log_probs(each, s.ensemble_average).view(n, k, -1)
            at_limit = step >= limits  # (n,): eos is the only choice
            forcing = prefix is not None and step <= prefix.shape[1]
            raw = log_probs.clone() if forcing else None
            log_probs = rules.apply(log_probs, history, step, at_limit)
            if forcing:  # the prefix's token is the only choice (the limits leave room for the prefix and eos)
                token = prefix[:, step - 1].clamp(min=0)[:, None, None].expand(n, k, 1)  # (n, k, 1)
                only = torch.full_like(log_probs, -math.inf).scatter_(2, token, raw.gather(2, token))
                log_probs = torch.where((prefix[:, step - 1] >= 0)[:, None, None], only, log_probs)
            if step >= shortest:  # before, no sentence is at its limit
                log_probs = torch.where(at_limit[:, None, None] & not_eos, -math.inf, log_probs)
            parents = None  # the beams the new beams continue: the cache learns them after the step's host read
            if k == 1:  # greedy, as tensor2tensor decodes with beam size 1: the likeliest token; eos ends it
                value, word = log_probs[:, 0].max(dim=-1)  # (n,)
                scores = scores + value[:, None]
                history[:, step] = word
                done = word == eos  # at the limit eos is the only choice
                finished = torch.where(done[:, None], scores / gnmt_length_penalty(step, s.alpha), finished)
                finished_tokens = torch.where(done[:, None, None], history[:, None], finished_tokens)
                finished_lengths = finished_lengths.masked_fill(done[:, None], step)
            else:
                values, beams, words = search.step(scores, log_probs)
                # candidates among the first k that end in eos join the finished ones (top k by normalized score)
                ending = (words[:, :k] == eos) & torch.isfinite(values[:, :k])
                rows = (beams[:, :k] + torch.arange(n, device=device)[:, None] * k).view(-1)
                ended_tokens = history[rows].view(n, k, -1)  # (n, k, L), a copy (indexing by a tensor)
                ended_tokens[:, :, step] = eos
                ended = torch.where(ending, values[:, :k] / gnmt_length_penalty(step, s.alpha), -math.inf)
                finished, pick = torch.cat([finished, ended], 1).topk(k, dim=-1)  # (n, k), best first
                finished_tokens = torch.cat([finished_tokens, ended_tokens], 1).gather(
                    1, pick[:, :, None].expand(-1, -1, finished_tokens.shape[-1])
                )
                finished_lengths = torch.cat([finished_lengths, torch.full_like(finished_lengths, step)], 1)
                finished_lengths = finished_lengths.gather(1, pick)
                scores, beams, words = search.live_on(values, beams, words)
                done = at_limit | _search_done(finished, scores.max(-1).values, limits, step, s)
                parents = beams
                history = history[(beams + torch.arange(n, device=device)[:, None] * k).view(-1)]
                history[:, step] = words.view(-1)

            flags = done.tolist()  # the one host read of the step; the indices below are built from it on the host
            keep = None
            if any(flags):
                ended = torch.tensor([i for i, flag in enumerate(flags) if flag], device=device)
                best[sentence[ended]], best_tokens[sentence[ended]] = finished[ended], finished_tokens[ended]
                best_lengths[sentence[ended]] = finished_lengths[ended]
                searching = not all(flags)
            if searching and any(flags):
                keep = torch.tensor([i for i, flag in enumerate(flags) if not flag], device=device)  # (m,)
                kept = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)  # (m * k,) their beams' rows
                sentence, scores, limits = sentence[keep], scores[keep], limits[keep]
                prefix = prefix[keep] if prefix is not None else None
                finished, finished_tokens, history = finished[keep], finished_tokens[keep], history[kept]
                finished_lengths = finished_lengths[keep]
            if searching:
                for part in parts:
                    part.next_step(parents, keep)
        if not s.synced_gpus:
            if not searching:
                break
        elif not _anyone_searching(searching, device):
            break

    lengths = best_lengths[:, :returned].reshape(-1)
    width = 1 + int(lengths.max()) if batch else 1
    return best_tokens[:, :returned].reshape(batch * returned, -1)[:, :width], best[:, :returned].reshape(-1)


class _ModelDecoding:
    """One model's side of `paper_search`: its encoder output (computed once), its cache and its decoder steps.
    An ensemble holds one per model, each with its own cache."""

    def __init__(self, model, input_ids, attention_mask, k: int, longest: int, settings: SearchSettings):
        self.model, self.decoder, self.k = model, model.get_decoder(), k
        hidden = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (n, S, d)
        self.fold = settings.use_cache and model.config._attn_implementation in FOLDING_ATTENTION
        self.idle_step = _idle_step(model, hidden[:1], attention_mask[:1], settings.start)
        if not self.fold:  # kernels that need one key row per query row, or no cache: the encoder output per beam
            hidden, attention_mask = hidden.repeat_interleave(k, 0), attention_mask.repeat_interleave(k, 0)
        self.hidden = hidden
        self.cross_mask = None if self.fold else attention_mask  # where beams fold, the cache masks padding itself
        if not settings.use_cache:
            self.cache = None
        elif self.fold:
            self.cache = FoldedSearchCache(longest, k, attention_mask, hidden.dtype)
        else:
            self.cache = SearchCache(longest, k)

    def log_probs(self, history: torch.Tensor, step: int, dtype: torch.dtype) -> torch.Tensor:
        """(n * k, vocab) log-probabilities of the next token after `history[:, :step]`."""
        if self.cache is None:  # the whole hypothesis again, no cache
            embeds = self.decoder.embed.embed_tokens(history[:, :step])
        else:
            embeds = self.decoder.embed.embed_tokens(history[:, step - 1 : step])  # ids from this search: in range
        states, _, _, _ = self.decoder(
            None, self.hidden, None, self.cross_mask, past_key_values=self.cache, inputs_embeds=embeds
        )
        return F.log_softmax(self.model._output_logits(states[:, -1]).to(dtype), dim=-1)

    def next_step(self, parents: torch.LongTensor | None, keep: torch.LongTensor | None) -> None:
        """The beams continue `parents`; only the sentences `keep` go on (see `FoldedSearchCache.next_step`)."""
        if keep is not None:
            k = self.k
            per_sentence = keep if self.fold else (keep[:, None] * k + torch.arange(k, device=keep.device)).view(-1)
            self.hidden = self.hidden[per_sentence]
            self.cross_mask = self.cross_mask[per_sentence] if self.cross_mask is not None else None
        if self.cache is not None:
            self.cache.next_step(parents, keep)


def ensemble_log_probs(each: list[torch.Tensor], average: str) -> torch.Tensor:
    """The ensemble's next-token scores from its models' log-probabilities: their mean ("log_probs", OpenNMT's
    default), or the log of the mean probability ("probs", what fairseq's EnsembleModel computes)."""
    stacked = torch.stack(each)
    if average == "probs":
        return torch.logsumexp(stacked, dim=0) - math.log(len(each))
    return stacked.mean(dim=0)


def _search_done(finished, best_live, limits, step: int, settings: SearchSettings) -> torch.Tensor:
    """(n,) whether each sentence's search may stop, by its early-stopping rule (see `paper_search`)."""
    alpha, k = settings.alpha, settings.num_beams
    if settings.early_stopping is True:  # transformers: as soon as k hypotheses finished
        return torch.isfinite(finished[:, k - 1])
    if settings.early_stopping is False:  # transformers' heuristic: the best live beam, were it to end next
        return finished[:, k - 1] >= best_live / gnmt_length_penalty(step + 1, alpha)
    # exact: log P only falls, so a live beam reaches at most log P / (the largest lp of a length still possible)
    first_end = max(step + 1, settings.min_step)
    largest_lp = gnmt_length_penalty(limits if alpha >= 0 else limits.clamp(max=first_end), alpha)
    return finished[:, settings.returned - 1] >= best_live / largest_lp


def _idle_step(model, hidden: torch.Tensor, attention_mask: torch.Tensor, start: int):
    """A decoder step on one token, its output unused: what a process whose sentences are done runs while other
    processes still search (`synced_gpus`), so that every module's forward, and the collectives of a sharded
    model in it, runs as often in every process."""
    start_ids = torch.full((1, 1), start, dtype=torch.long, device=hidden.device)

    def step():
        embeds = model.get_decoder().embed.embed_tokens(start_ids)
        states, _, _, _ = model.get_decoder()(None, hidden, None, attention_mask, inputs_embeds=embeds)
        model._output_logits(states[:, -1])

    return step


def _anyone_searching(searching: bool, device: torch.device) -> bool:
    """synced_gpus: whether any process still searches (a collective every step, as transformers' search)."""
    import torch.distributed as dist

    flag = torch.tensor([1.0 if searching else 0.0], device=device)
    dist.all_reduce(flag)
    return flag.item() > 0


def hypothesis_outputs(model, input_ids, attention_mask, sequences, returned: int, options: set) -> dict:
    """What `return_dict_in_generate` adds for the returned hypotheses, from one teacher-forced forward over
    them (the search keeps none of it): per step, `scores` (log-probabilities) and `logits` ((rows, vocab) each);
    per step and layer `decoder_attentions` ((rows, heads, 1, step)), `cross_attentions` ((rows, heads, 1,
    source)) and `decoder_hidden_states` ((rows, 1, d_model)); the encoder's attentions and hidden states."""
    if not options or sequences.shape[1] < 2:
        return {}
    decoder_input = sequences[:, :-1]
    with torch.no_grad():
        out = model(
            input_ids=input_ids.repeat_interleave(returned, 0),
            attention_mask=attention_mask.repeat_interleave(returned, 0),
            decoder_input_ids=decoder_input,
            output_attentions="output_attentions" in options,
            output_hidden_states="output_hidden_states" in options,
            use_cache=False,
            return_dict=True,
        )
    steps = range(decoder_input.shape[1])
    extra = {}
    if "output_scores" in options:
        extra["scores"] = tuple(F.log_softmax(out.logits[:, t].float(), dim=-1) for t in steps)
    if "output_logits" in options:
        extra["logits"] = tuple(out.logits[:, t] for t in steps)
    if "output_attentions" in options:
        extra["encoder_attentions"] = out.encoder_attentions
        extra["decoder_attentions"] = tuple(
            tuple(a[:, :, t : t + 1, : t + 1] for a in out.decoder_attentions) for t in steps
        )
        extra["cross_attentions"] = tuple(tuple(a[:, :, t : t + 1] for a in out.cross_attentions) for t in steps)
    if "output_hidden_states" in options:
        extra["encoder_hidden_states"] = out.encoder_hidden_states
        extra["decoder_hidden_states"] = tuple(tuple(h[:, t : t + 1] for h in out.decoder_hidden_states) for t in steps)
    return extra


# generation options the paper's search serves (`generate` reads them from its arguments and the generation config)
SERVED = {
    "num_beams", "length_penalty", "max_new_tokens", "max_length", "min_new_tokens", "min_length",
    "no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "early_stopping", "use_cache",
    "return_dict_in_generate", "output_scores", "output_logits", "output_attentions", "output_hidden_states",
    "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "do_sample", "synced_gpus",
}  # fmt: skip
# sampling's knobs: without do_sample transformers ignores them (and warns); so does the paper's search
SAMPLING_ONLY = {"temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff"}
# arguments of `generate` itself (not generation config fields); anything else not None goes to transformers
MODEL_INPUTS = {"input_ids", "attention_mask", "synced_gpus", "decoder_input_ids", "decoder_attention_mask"}
OUTPUT_OPTIONS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")


@functools.cache
def _defaults() -> dict:
    """transformers' default generation values (4.57's defaults, which 5.x keeps aside and reads as unset)."""
    default = GenerationConfig()
    values = default.to_dict()
    if hasattr(default, "_get_default_generation_params"):  # transformers 5.x
        values.update(default._get_default_generation_params())
    return values


def _given(config: GenerationConfig, passed: set[str]) -> dict:
    """The generation values in force that the user set: passed to `generate`, or in the generation config with a
    value other than transformers' default (transformers cannot tell the two apart either)."""
    defaults = _defaults()
    values = {}
    for key, value in config.to_dict().items():
        if key.startswith("_") or key == "transformers_version" or value is None:
            continue
        if key in passed or value != defaults.get(key):
            values[key] = value
    return values


def _whole(name: str, value, smallest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
        raise ValueError(f"`{name}` must be an integer >= {smallest}, got {value!r}")
    return value


def search_settings(model, config: GenerationConfig, given: dict, synced_gpus: bool) -> SearchSettings:
    """The paper's search settings from the generation values in force, checked (ValueError, as transformers)."""
    model_config = model.config
    tokens = {}
    for name in ("eos_token_id", "pad_token_id", "decoder_start_token_id"):
        value = given.get(name, getattr(model_config, name))
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        tokens[name] = _whole(name, value, 0)
    beams = _whole("num_beams", 1 if config.num_beams is None else config.num_beams, 1)
    alpha = 1.0 if config.length_penalty is None else config.length_penalty
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise ValueError(f"`length_penalty` must be a finite number, got {alpha!r}")
    returned = _whole("num_return_sequences", config.num_return_sequences or 1, 1)  # None: 4.57's default
    if returned > beams:
        raise ValueError(f"num_return_sequences={returned} cannot exceed num_beams={beams}")
    min_step = max(
        _whole("min_length", given.get("min_length", 0), 0),
        _whole("min_new_tokens", given.get("min_new_tokens", 0), 0) + 1,
    )
    bad_words = given.get("bad_words_ids") or []
    vocab = model_config.decoder_vocab_size
    if not isinstance(bad_words, (list, tuple)) or not all(
        isinstance(words, (list, tuple)) and words and all(_is_token(t, vocab) for t in words) for words in bad_words
    ):
        raise ValueError(f"`bad_words_ids` must be a list of non-empty lists of token ids < {vocab}, got {bad_words!r}")
    if [tokens["eos_token_id"]] in [list(words) for words in bad_words]:
        raise ValueError("`bad_words_ids` bans eos on its own: no hypothesis could end")
    early = given.get("early_stopping", "never")
    if early not in (True, False, "never"):
        raise ValueError(f"`early_stopping` must be True, False or 'never', got {early!r}")
    return SearchSettings(
        num_beams=beams,
        alpha=float(alpha),
        eos=tokens["eos_token_id"],
        pad=tokens["pad_token_id"],
        start=tokens["decoder_start_token_id"],
        returned=returned,
        min_step=min_step,
        no_repeat_ngram_size=_whole("no_repeat_ngram_size", given.get("no_repeat_ngram_size", 0), 0),
        bad_words_ids=tuple(tuple(words) for words in bad_words),
        early_stopping=early,
        use_cache=bool(config.use_cache if config.use_cache is not None else True),
        synced_gpus=bool(synced_gpus),
    )


def _is_token(value, vocab: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab


def source_mask(input_ids: torch.Tensor, attention_mask, pad: int | None, eos: int | None) -> torch.Tensor:
    """The encoder's attention mask as transformers infers it: given (any dtype, nonzero = attend), or from
    padding only where the pad token occurs and differs from eos; otherwise every token attends."""
    if attention_mask is not None:
        return attention_mask.ne(0).long()
    if pad is not None and pad != eos and bool((input_ids == pad).any()):
        return input_ids.ne(pad).long()
    return torch.ones_like(input_ids, dtype=torch.long)


def length_limits(attention_mask: torch.Tensor, given: dict, forced: torch.Tensor | None = None) -> torch.Tensor:
    """Per sentence, §6.1's limit (source length + 50 target tokens) within `max_new_tokens` or `max_length`
    (transformers counts the decoder start token in the latter; `max_new_tokens` wins where both are given, as
    there). With a target prefix of `forced` tokens (batch,), `max_new_tokens` counts the tokens after it (as
    transformers counts new tokens after a prompt), and every limit leaves room for the prefix and eos."""
    limits = attention_mask.sum(-1) + 50
    forced = torch.zeros_like(limits) if forced is None else forced.to(limits.device)
    if given.get("max_new_tokens") is not None:
        limits = torch.minimum(limits, forced + _whole("max_new_tokens", given["max_new_tokens"], 1))
    elif given.get("max_length") is not None:
        limits = limits.clamp(max=_whole("max_length", given["max_length"], 2) - 1)
    return torch.maximum(limits, forced + 1)


def target_prefix(decoder_input_ids: torch.Tensor, decoder_attention_mask, settings: SearchSettings, vocab: int):
    """`decoder_input_ids` (batch, P) as the search's prefix: the tokens after the start token, -1 after each row's
    end (right padding: `decoder_attention_mask`, else pad tokens after the start), and their counts (batch,)."""
    ids = decoder_input_ids.long()
    if ids.dim() != 2 or ids.shape[1] == 0:
        raise ValueError(
            f"decoder_input_ids must be (batch, length) and begin with the decoder start token, got {tuple(ids.shape)}"
        )
    if bool((ids[:, 0] != settings.start).any()):
        raise ValueError(f"decoder_input_ids must begin with decoder_start_token_id={settings.start} in every row")
    if decoder_attention_mask is not None:
        present = decoder_attention_mask.ne(0)[:, 1:]
    else:
        present = ids[:, 1:] != settings.pad
    present = present & (present.long().cumprod(-1) > 0)  # right padding: a row ends at its first gap
    tokens = ids[:, 1:].masked_fill(~present, -1)
    if bool(((tokens == settings.eos) | (tokens >= vocab)).any()):
        raise ValueError(f"a target prefix may not hold eos ({settings.eos}) or ids beyond the vocabulary ({vocab})")
    return tokens, present.sum(-1)


def generate(model, inputs, generation_config, paper_decoding, parent_generate, **kwargs):
    """`AaynForConditionalGeneration.generate`: §6.1's search unless `paper_decoding=False` (or
    `config.paper_decoding` is off). Every generation value in force counts, whether passed or set in the
    generation config; the search serves those in SERVED, and anything else (sampling, logits processors, other
    strategies) goes to transformers' `generate` with §6.1's limit (and alpha as its own length penalty
    |Y|^alpha), with one warning naming what did not fit the paper's search."""
    base = model.generation_config if generation_config is None else generation_config
    paper = model.config.paper_decoding if paper_decoding is None else paper_decoding
    kwargs.pop("labels", None)  # Seq2SeqTrainer's predict_with_generate passes them along
    with cpu_decoding_layout(model):
        if not paper:
            return parent_generate(inputs, generation_config=generation_config, **kwargs)
        config = copy.deepcopy(base)
        passed = {key for key, value in kwargs.items() if value is not None}
        unused = config.update(**{key: kwargs[key] for key in passed})
        given = _given(config, passed - set(unused))
        sampling = bool(config.do_sample)
        others = (set(given) - SERVED - SAMPLING_ONLY) | (set(unused) - MODEL_INPUTS)
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if input_ids is None:
            others.add("inputs_embeds" if "inputs_embeds" in passed else "no input_ids")
        if sampling or others:
            return _transformers_search(model, inputs, generation_config, parent_generate, given, others, kwargs)
        return _paper_generate([model], config, given, input_ids, kwargs)


def _paper_generate(models: list, config: GenerationConfig, given: dict, input_ids, kwargs: dict, average=None):
    """The paper's search for one model or an ensemble, with the generation values in force."""
    if set(given) & SAMPLING_ONLY:
        ignored = sorted(set(given) & SAMPLING_ONLY)
        logger.warning_once(f"{ignored} only apply to sampling (do_sample=True): ignored, as transformers does")
    model = models[0]
    settings = search_settings(model, config, given, kwargs.get("synced_gpus") or False)
    if average is not None:
        settings.ensemble_average = average
    attention_mask = source_mask(input_ids, kwargs.get("attention_mask"), settings.pad, settings.eos)
    prefix = forced = None
    if kwargs.get("decoder_input_ids") is not None:
        vocab = model.config.decoder_vocab_size
        prefix, forced = target_prefix(
            kwargs["decoder_input_ids"], kwargs.get("decoder_attention_mask"), settings, vocab
        )
        prefix, forced = prefix.to(input_ids.device), forced.to(input_ids.device)
    limits = length_limits(attention_mask, given, forced)
    sequences, scores = paper_search(models, input_ids, attention_mask, limits, settings, prefix)
    if not config.return_dict_in_generate:
        return sequences
    options = {option for option in OUTPUT_OPTIONS if getattr(config, option, False)}
    if len(models) > 1 and options:
        raise ValueError(f"an ensemble returns sequences and sequences_scores only, not {sorted(options)}")
    extra = hypothesis_outputs(model, input_ids, attention_mask, sequences, settings.returned, options)
    return GenerateBeamEncoderDecoderOutput(sequences=sequences, sequences_scores=scores, **extra)


ENSEMBLE_CONFIG_FIELDS = ("vocab_size", "decoder_vocab_size", "pad_token_id", "eos_token_id", "decoder_start_token_id")


@torch.no_grad()
def generate_ensemble(models, input_ids, attention_mask=None, *, average: str = "log_probs", **kwargs):
    """§6.1's search over an ensemble: at each step the models' next-token log-probabilities are averaged
    (`average="log_probs"`, OpenNMT's default; `"probs"`: the log of the mean probability, fairseq's
    EnsembleModel), each model with its own cache. The first model's generation config gives the defaults;
    options as `generate` (not sampling, not transformers' search). The models must share their vocabulary and
    special ids (`ValueError` names the first difference); an ensemble of one is that model's `generate`."""
    models = list(models)
    if not models:
        raise ValueError("an ensemble needs at least one model")
    if average not in ("log_probs", "probs"):
        raise ValueError(f"average must be 'log_probs' or 'probs', got {average!r}")
    first = models[0]
    for i, other in enumerate(models[1:], 2):
        for name in ENSEMBLE_CONFIG_FIELDS:
            if getattr(other.config, name) != getattr(first.config, name):
                raise ValueError(
                    f"model {i} of the ensemble has {name}={getattr(other.config, name)}, model 1 "
                    f"{getattr(first.config, name)}: an ensemble's models must share their vocabulary"
                )
    config = copy.deepcopy(first.generation_config)
    kwargs = {**kwargs, "attention_mask": attention_mask}
    passed = {key for key, value in kwargs.items() if value is not None}
    unused = config.update(**{key: kwargs[key] for key in passed})
    given = _given(config, passed - set(unused))
    others = (set(given) - SERVED - SAMPLING_ONLY) | (set(unused) - MODEL_INPUTS)
    if config.do_sample or others:
        raise ValueError(
            f"an ensemble decodes with the paper's search only; it does not take {sorted(others) or ['do_sample']}"
        )
    with contextlib.ExitStack() as stack:
        for model in models:
            stack.enter_context(cpu_decoding_layout(model))
        return _paper_generate(models, config, given, input_ids, kwargs, average)


def _transformers_search(model, inputs, generation_config, parent_generate, given, others, kwargs):
    """transformers' `generate`, keeping §6.1's limit (the batch's longest source + 50) where none was given."""
    if others:
        logger.warning_once(
            f"the paper's search does not serve {sorted(others)}: decoding with transformers' search, with §6.1's "
            "length limit (source + 50) and alpha as its length penalty (|Y|^alpha, not GNMT's)"
        )
    if "max_length" not in given and "max_new_tokens" not in given:
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if input_ids is not None:
            config = model.config
            mask = source_mask(input_ids, kwargs.get("attention_mask"), config.pad_token_id, config.eos_token_id)
            kwargs = {**kwargs, "max_new_tokens": int(mask.sum(-1).max()) + 50}
    return parent_generate(inputs, generation_config=generation_config, **kwargs)
