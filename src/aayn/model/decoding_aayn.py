"""The model's side of §6.1's search (fairseq's `forward_encoder`, `forward_decoder`, `reorder_incremental_state`):
`Decoding` holds the source encoded once and the decoder's cache, runs one decoder step for the live rows and
reorders or drops rows of its cache. `paper_search` (search_aayn.py) gets one from the model's `start_decoding`
and calls nothing else of the model.

Which path computes a step is decided here. The first step runs the decoder's `forward` (it writes the encoder's
keys and values into the cache); past it, a step whose beams fold (`FoldedSearchCache`) runs the same layers through
`AaynDecoder.step`, without `forward`'s output recording and mask building, and with the attention kernels the cache
names (`DecoderCache.attention_kernel`), wherever that computes what `forward` would (`plain_steps`). This file
travels with every saved checkpoint (the model file imports it): it imports only torch and transformers.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from .cache_aayn import FOLDING_ATTENTION, FoldedSearchCache, SearchCache
from .ops_aayn import STEP_ATTENTION, eager_attention_forward, output_logits


class AaynDecodingMixin:
    """The methods of `AaynForConditionalGeneration` that decoding calls."""

    def start_decoding(
        self,
        input_ids,
        attention_mask,
        num_beams: int,
        longest: int,
        use_cache: bool = True,
        start: int | None = None,
        alignment: tuple[int, int] | None = None,
        graphs: bool = False,
        compiled: bool = False,
    ) -> Decoding:
        """§6.1's search's contract with the model: the source encoded once, and the decoder's state for `num_beams`
        beams a sentence and at most `longest` steps, which runs one step for the live rows (`log_probs`) and
        reorders or drops rows of its cache (`next_step`); how a step is computed is decided there. `alignment`
        (layer, heads): each step also keeps that layer's cross-attention, averaged over its first heads
        (`recorded`), where the beams fold (see `Decoding.records`). `graphs`: the steps after the first with
        static shapes, replayed from a CUDA graph (`cuda_graphs.GraphedSteps`), where the plain step runs.
        `compiled`: those static steps compiled by torch.compile (`cuda_graphs.compiled_static_step`), on any
        device."""
        start = self.config.decoder_start_token_id if start is None else start
        return Decoding(self, input_ids, attention_mask, num_beams, longest, use_cache, start, alignment, graphs,
                        compiled)  # fmt: skip

    def output_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """lm_head(hidden_states) (§3.4's pre-softmax projection), read from the CPU decoding layout while
        `generate` holds one (ops_aayn)."""
        return output_logits(self.lm_head, hidden_states, getattr(self, "_decoding_matrix", None))

    def next_log_probs(self, hidden_states: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """A step's log-probabilities of the next token, in `dtype`, from the decoder's last hidden states."""
        return F.log_softmax(self.output_logits(hidden_states).to(dtype), dim=-1)


class Decoding:
    """One model's decoding of a batch for a search of `num_beams` beams a sentence and at most `longest` steps.
    An ensemble holds one per model, each with its own cache."""

    def __init__(self, model, input_ids, attention_mask, num_beams: int, longest: int, use_cache: bool, start: int,
                 alignment=None, graphs: bool = False, compiled: bool = False):  # fmt: skip
        self.model, self.decoder, self.k, self.longest = model, model.get_decoder(), num_beams, longest
        hidden = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (n, S, d)
        self.fold = use_cache and model.config._attn_implementation in FOLDING_ATTENTION
        self.idle_inputs = hidden[:1], attention_mask[:1], torch.full((1, 1), start, device=hidden.device)
        if not self.fold:  # kernels that need one key row per query row, or no cache: the encoder output per beam
            hidden, attention_mask = (
                hidden.repeat_interleave(num_beams, 0),
                attention_mask.repeat_interleave(num_beams, 0),
            )
        self.hidden = hidden
        self.cross_mask = None if self.fold else attention_mask  # where beams fold, the cache masks padding itself
        if not use_cache:
            self.cache = None
        elif self.fold:
            self.cache = FoldedSearchCache(longest, num_beams, attention_mask, hidden.dtype)
        else:
            self.cache = SearchCache(longest, num_beams)
        self.plain = self.fold and plain_steps(self.decoder)
        if self.plain:
            self.cache.step_kernels = True
        self.positions = self.decoder.embed.encodings(longest + 1, hidden.device) if self.plain else None
        self.records = alignment is not None and self.fold  # the folded layout: the cache holds the recorder
        if self.records:
            self.cache.record_cross = CrossAttentionRecorder(*alignment)
        # the static steps: replayed from CUDA graphs, compiled, or both (the alignment's recorder reads the host)
        self.graphs = (graphs or compiled) and self.plain and not self.records
        self.compiled = compiled and self.graphs
        self.steps = None  # `GraphedSteps`, from the second step on

    @property
    def recorded(self) -> torch.Tensor:
        """(n * k, S) the alignment layer's cross-attention of the last step, averaged over its first heads."""
        return self.cache.record_cross.weights

    def log_probs(self, history: torch.Tensor, step: int, dtype: torch.dtype) -> torch.Tensor:
        """(n * k, vocab) log-probabilities, in `dtype`, of the next token after `history[:, :step]`."""
        if self.plain and step > 1:
            self.decoder.embed.warn_of_length(step)
            if not self.graphs:
                states = self.decoder.step(history[:, step - 1 : step], self.cache, self.positions)
                return self.model.next_log_probs(states, dtype)
            if self.steps is None:
                self.steps = graphed_steps()(self, self.longest, dtype, self.compiled)
            return self.steps.log_probs(history, step)
        if self.cache is None:  # the whole hypothesis again, no cache
            embeds = self.decoder.embed.embed_tokens(history[:, :step])
        else:
            embeds = self.decoder.embed.embed_tokens(history[:, step - 1 : step])  # ids from this search: in range
        states = self.decoder(
            None, self.hidden, None, self.cross_mask, past_key_values=self.cache, inputs_embeds=embeds
        ).last_hidden_state
        return self.model.next_log_probs(states[:, -1], dtype)

    def next_step(self, parents: torch.LongTensor | None, keep: torch.LongTensor | None) -> None:
        """The beams continue `parents`; only the sentences `keep` go on (see `FoldedSearchCache.next_step`)."""
        if self.steps is not None:
            self.steps.next_step(parents, keep)
            return
        if keep is not None:
            k = self.k
            per_sentence = keep if self.fold else (keep[:, None] * k + torch.arange(k, device=keep.device)).view(-1)
            self.hidden = self.hidden[per_sentence]
            self.cross_mask = self.cross_mask[per_sentence] if self.cross_mask is not None else None
        if self.cache is not None:
            self.cache.next_step(parents, keep)

    def idle_step(self) -> None:
        """A decoder step on one token, its output unused: what a process whose sentences are done runs while other
        processes still search (`synced_gpus`), so that every module's forward, and the collectives of a sharded
        model in it, runs as often in every process."""
        hidden, attention_mask, start_ids = self.idle_inputs
        embeds = self.decoder.embed.embed_tokens(start_ids)
        states = self.decoder(None, hidden, None, attention_mask, inputs_embeds=embeds).last_hidden_state
        self.model.output_logits(states[:, -1])


class CrossAttentionRecorder:
    """Word alignments from the search itself (fairseq's `--print-alignment`): called by the encoder-decoder
    attention of every layer at every step where the beams fold (the cache carries it: `observe_cross`), it keeps layer
    `layer`'s weights softmax(Q K^T / sqrt(d_k) + padding) averaged over the first `heads` heads, (n * k, S) in float32.
    The step's output is computed by its own kernel as without it."""

    def __init__(self, layer: int, heads: int):
        self.layer, self.heads, self.weights = layer, heads, None

    def __call__(self, attention, query: torch.Tensor, key: torch.Tensor, mask) -> None:
        if attention.layer_idx == self.layer:  # query (n, nh, k, hs), key (n, nh, S, hs), mask (n, 1, 1, S)
            weights = eager_attention_forward(attention, query, key, key, mask, attention.scaling)[1]
            self.weights = weights[:, : self.heads].float().mean(1).reshape(-1, key.shape[2])


def graphed_steps() -> type:
    """`GraphedSteps`, from the installed package: a saved folder does not carry the static steps' code."""
    try:
        from aayn.formats.aayn.cuda_graphs import GraphedSteps
    except ImportError as error:
        raise ImportError(
            f"generate(cuda_graphs=True) and generate(compiled_steps=True) need the aayn package installed (pip "
            f"install aayn): {error}"
        ) from None
    return GraphedSteps


def plain_steps(decoder) -> bool:
    """Whether `AaynDecoder.step`, with the attention kernels of `STEP_ATTENTION`, computes what the decoder's
    `forward` would: every module of the decoder in eval (no dropout: the kernels take none), recording nothing
    (the kernels return no weights, and `forward` records), with sdpa or eager attention. The step calls the
    decoder's layers and their modules as `forward` does (their hooks run, a compiled module runs compiled), not the
    decoder's own `forward`."""
    training = any(module.training for module in decoder.modules())
    recording = decoder.config.output_attentions or decoder.config.output_hidden_states
    return not (training or recording) and decoder.config._attn_implementation in STEP_ATTENTION


__all__ = ["AaynDecodingMixin", "CrossAttentionRecorder", "Decoding", "plain_steps"]
