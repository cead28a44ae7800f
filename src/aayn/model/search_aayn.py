"""§6.1's search: "We used beam search with a beam size of 4 and length penalty alpha = 0.6 [GNMT] ... set the
maximum output length during inference to input length + 50, but terminate early when possible."

Split as in fairseq: `BeamSearch.step` picks the candidates of one step, `paper_search` runs the steps as a loop
of named phases (score, choose, finish, drop), as transformers' `_beam_search` does, and `SearchState` keeps the
books of the sentences still searched, dropping finished ones and following beams itself. All bookkeeping stays
in tensors, batched over sentences and beams: the host reads one small tensor per step on the CPU, every few steps
on an accelerator (are sentences done? `done_check_interval`), so a GPU is never stalled by Python loops over
rows. The search calls one method of the model, `start_decoding`, and the decoding state it returns
(`decoding_aayn.py`: encoder output, cache, decoder steps); how `generate()` options reach the search is in
`generation_aayn.py`.

This file travels with every saved checkpoint (the model file imports it): it imports only torch and transformers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from .constraints_aayn import ConstrainedSearch
from .policy_aayn import largest_length_penalty, length_penalty, search_done


class BeamSearch:
    """One step of §6.1's search for n sentences of k beams (fairseq's `search.BeamSearch.step`).

    From the live beams' scores and the next-token log-probabilities, the 2k best candidates per sentence by
    log P: among the first k, those ending in eos finish (fairseq's rule); the best k of the others live on.
    """

    def __init__(self, num_beams: int, eos_token_id: int):
        self.k, self.eos = num_beams, eos_token_id
        self.slots = None  # (2k,) the candidates' places, made once (on a GPU each tensor made is a kernel)

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
        if self.slots is None or self.slots.device != values.device:
            self.slots = torch.arange(2 * k, device=values.device)
        places = torch.where(go_on, self.slots.expand_as(values), 2 * k)  # those that do not go on sort last
        order = places.argsort(dim=-1, stable=True)[:, :k]  # (n, k), in candidate order
        scores = torch.where(go_on, values, -math.inf).gather(1, order)
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
    normalization: str = "gnmt"  # lp(Y): GNMT's, or fairseq's |Y|^alpha (`policy_aayn.length_penalty`)
    alignment: tuple[int, int] | None = None  # (layer, heads): keep that cross-attention of each output token
    cuda_graphs: bool = False  # the decoder's steps replayed from CUDA graphs (`aayn.formats.aayn.cuda_graphs`)
    compiled_steps: bool = False  # the static steps compiled by torch.compile (`cuda_graphs.compiled_static_step`)


# steps between the host's reads of which sentences are done, off the CPU (`done_check_interval`)
ACCELERATOR_CHECK_EVERY = 4


def done_check_interval(device: torch.device) -> int:
    """How often the search reads back which sentences are done: every step on the CPU (the read costs nothing
    there, and a done sentence left in the batch costs its rows' compute); every few steps on an accelerator,
    where each read makes the host wait until the device has finished the step, and a few steps of rows that are
    done cost less than the waits."""
    return 1 if device.type == "cpu" else ACCELERATOR_CHECK_EVERY


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


@dataclass
class SearchState:
    """The books of the sentences still searched, n of them with k beams each. Every tensor field has one row per
    sentence, or per live beam if it is named in BEAM_ROWS: `keep` drops finished sentences from all of them, and
    `live_on` moves the beams' histories to the beams they continue, so that no field is forgotten when sentences
    leave."""

    BEAM_ROWS: ClassVar[tuple[str, ...]] = ("history", "rows_before")
    k: int
    sentence: torch.Tensor  # (n,) its index in the batch
    limits: torch.Tensor  # (n,) its most target tokens
    scores: torch.Tensor  # (n, k) the live beams' log P
    history: torch.Tensor  # (n * k, longest + 1) the live beams' tokens, the start token first
    finished: torch.Tensor  # (n, k) its best finished hypotheses' scores, best first
    finished_tokens: torch.Tensor  # (n, k, longest + 1) and their tokens
    finished_lengths: torch.Tensor  # (n, k) and their lengths (tokens after the start)
    prefix: torch.Tensor | None  # (n, P) the target prefix's tokens, -1 after its end
    # where the search keeps its attention (`AttentionTrail`): (n * k,) each live beam's row at the step before, and
    # (n, k) each finished hypothesis's row at the step that ended it
    rows_before: torch.Tensor | None = None
    finished_rows: torch.Tensor | None = None
    largest_lp: torch.Tensor | None = None  # (n,) lp at its limit, the largest lp a hypothesis can have (alpha >= 0)

    @classmethod
    def start(cls, limits, longest: int, prefix, settings: SearchSettings, dtype, trail: bool = False) -> SearchState:
        """The books at the start; `trail`: with the rows an `AttentionTrail` follows."""
        batch, k, device = limits.shape[0], settings.num_beams, limits.device
        scores = torch.full((batch, k), -math.inf, dtype=dtype, device=device)
        scores[:, 0] = 0.0  # one live beam at the start, so the first step does not pick the same token k times
        history = torch.full((batch * k, longest + 1), settings.pad, dtype=torch.long, device=device)
        history[:, 0] = settings.start
        return cls(
            k=k,
            sentence=torch.arange(batch, device=device),
            limits=limits,
            scores=scores,
            history=history,
            finished=torch.full((batch, k), -math.inf, dtype=dtype, device=device),
            finished_tokens=torch.full((batch, k, longest + 1), settings.pad, dtype=torch.long, device=device),
            finished_lengths=torch.zeros((batch, k), dtype=torch.long, device=device),
            prefix=prefix,
            rows_before=torch.arange(batch * k, device=device) if trail else None,
            finished_rows=torch.zeros((batch, k), dtype=torch.long, device=device) if trail else None,
            largest_lp=largest_length_penalty(limits, 0, settings.alpha, settings.normalization)
            if settings.alpha >= 0
            else None,
        )

    def beam_rows(self, beams: torch.Tensor) -> torch.Tensor:
        """(n, j) beams of each sentence -> their (n * j,) rows in the beam-row fields."""
        offsets = getattr(self, "_offsets", None)  # (n, 1) each sentence's first row, made again once n changes
        if offsets is None or offsets.shape[0] != beams.shape[0]:
            offsets = self._offsets = torch.arange(beams.shape[0], device=beams.device)[:, None] * self.k
        return (beams + offsets).view(-1)

    def finish(self, values, beams, words, step: int, settings: SearchSettings, frozen=None) -> None:
        """The candidates among the first k that end in eos join the finished hypotheses (the best k by score);
        `frozen` (n,): sentences done at an earlier step since the last check, whose hypotheses stay as they were."""
        n, k = beams.shape[0], self.k
        books = self.finished, self.finished_tokens, self.finished_lengths, self.finished_rows
        ending = (words[:, :k] == settings.eos) & (values[:, :k] > -math.inf)  # log P < +inf; NaN is not > either
        ended_tokens = self.history[self.beam_rows(beams[:, :k])].view(n, k, -1)  # (n, k, L), a copy
        ended_tokens[:, :, step] = settings.eos
        lp = length_penalty(step, settings.alpha, settings.normalization)
        ended = torch.where(ending, values[:, :k] / lp, -math.inf)
        self.finished, pick = torch.cat([self.finished, ended], 1).topk(k, dim=-1)  # (n, k), best first
        tokens = torch.cat([self.finished_tokens, ended_tokens], 1)  # (n, 2k, L)
        self.finished_tokens = tokens.gather(1, pick[:, :, None].expand(-1, -1, tokens.shape[2]))
        lengths = torch.cat([self.finished_lengths, torch.full_like(self.finished_lengths, step)], 1)
        self.finished_lengths = lengths.gather(1, pick)
        if self.finished_rows is not None:
            ended_rows = self.beam_rows(beams[:, :k]).view(n, k)
            self.finished_rows = torch.cat([self.finished_rows, ended_rows], 1).gather(1, pick)
        if frozen is not None:
            names = ("finished", "finished_tokens", "finished_lengths", "finished_rows")
            for name, before in zip(names, books):
                if before is not None:
                    keep = frozen.view(-1, *[1] * (before.dim() - 1))
                    setattr(self, name, torch.where(keep, before, getattr(self, name)))

    def live_on(self, scores, beams, words, step: int) -> None:
        """The new live beams: their scores, and their histories, those of the beams they continue plus `words`."""
        self.scores = scores
        rows = self.beam_rows(beams)
        self.history = self.history[rows]
        self.history[:, step] = words.view(-1)
        if self.rows_before is not None:
            self.rows_before = rows

    def keep(self, sentences: torch.LongTensor) -> None:
        """Only `sentences` (m,) go on: every field keeps their rows."""
        beams = (sentences[:, None] * self.k + torch.arange(self.k, device=sentences.device)).view(-1)  # (m * k,)
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, torch.Tensor):
                setattr(self, field.name, value[beams if field.name in self.BEAM_ROWS else sentences])


class Hypotheses:
    """Each sentence's best finished hypotheses, in the batch's order, stored as sentences leave the search."""

    def __init__(self, state: SearchState):
        self.scores = torch.full_like(state.finished, -math.inf)
        self.tokens, self.lengths = state.finished_tokens.clone(), state.finished_lengths.clone()
        self.rows = state.finished_rows.clone() if state.finished_rows is not None else None

    def store(self, state: SearchState, ended: torch.LongTensor) -> None:
        where = state.sentence[ended]
        self.scores[where], self.tokens[where] = state.finished[ended], state.finished_tokens[ended]
        self.lengths[where] = state.finished_lengths[ended]
        if self.rows is not None:
            self.rows[where] = state.finished_rows[ended]

    def best(self, returned: int, trail: AttentionTrail | None = None):
        """The `returned` best of each sentence: (batch * returned, width) tokens, their scores and, from `trail`,
        the attention that produced each token ((batch * returned, width - 1, S), after the start token) or None."""
        batch = self.scores.shape[0]
        lengths = self.lengths[:, :returned].reshape(-1)
        width = 1 + int(lengths.max()) if batch else 1
        tokens = self.tokens[:, :returned].reshape(batch * returned, -1)[:, :width]
        attention = None
        if trail is not None:
            attention = trail.read(lengths, self.rows[:, :returned].reshape(-1), width - 1)
        return tokens, self.scores[:, :returned].reshape(-1), attention


class AttentionTrail:
    """The aligning attention of a search (`SearchSettings.alignment`), kept once per step and never copied as
    beams reorder: each step's (rows, S) weights, and each of its live rows' row at the step before. A hypothesis's
    attention is read back along its path once the search ends (fairseq reorders a whole attention tensor every
    step instead)."""

    def __init__(self, source: int):
        self.source, self.steps, self.rows_before = source, [], []

    def record(self, weights: torch.Tensor, state: SearchState) -> None:
        """A step's weights (the live rows', (n * k, S)), with where those rows were at the step before."""
        self.steps.append(weights)
        self.rows_before.append(state.rows_before)

    def read(self, lengths: torch.Tensor, rows: torch.Tensor, width: int) -> torch.Tensor:
        """(hypotheses, width, S): the weights of each step of hypotheses that end at step `lengths` (0: none)
        from their row `rows` at that step, zero after their end."""
        out = torch.zeros((lengths.shape[0], width, self.source), device=lengths.device)
        rows = rows.clone()
        for step in range(width, 0, -1):
            on = (lengths >= step).nonzero()[:, 0]
            if on.numel():
                out[on, step - 1] = self.steps[step - 1][rows[on]]
                rows[on] = self.rows_before[step - 1][rows[on]]
        return out


@torch.no_grad()
def paper_search(
    model,
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor,
    max_new_tokens: torch.Tensor,
    settings,
    prefix: torch.LongTensor | None = None,
    constraints: ConstrainedSearch | None = None,
) -> tuple[torch.LongTensor, torch.Tensor, torch.Tensor | None]:
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
    `constraints` (constraints_aayn.py) makes each sentence's output contain its target phrases: the candidates
    of a step are chosen by dynamic beam allocation instead of by score alone (greedy decoding then runs as a
    search of one beam), and a hypothesis ends only once it met them.
    `settings.alignment` (layer, heads): each hypothesis keeps, token by token, that layer's cross-attention (the
    first model's) averaged over its first heads, as the step that chose the token computed it (`Decoding.records`).
    Returns the `returned` best hypotheses per sentence (start token, tokens, eos, padding after eos), their scores
    log P / lp(|Y|), and their attention (rows, tokens after the start token, source length), or None.
    """
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    device, s = input_ids.device, settings
    search, rules = BeamSearch(s.num_beams, s.eos), TokenRules(s, device)
    dtype = torch.promote_types(models[0].get_output_embeddings().weight.dtype, torch.float32)  # float32 or 64
    limits = max_new_tokens.to(device)  # (batch,)
    shortest, longest = torch.stack(limits.aminmax()).tolist()  # the one host read before the loop
    aligned = [s.alignment] + [None] * (len(models) - 1)  # the first model's attention aligns
    decoders = [m.start_decoding(input_ids, attention_mask, s.num_beams, longest, s.use_cache, s.start, alignment,
                                 s.cuda_graphs, s.compiled_steps)
                for m, alignment in zip(models, aligned)]  # fmt: skip
    trail = AttentionTrail(input_ids.shape[1]) if decoders[0].records else None  # each chosen token's attention
    state = SearchState.start(limits, longest, prefix, s, dtype, trail is not None)
    hypotheses = Hypotheses(state)
    not_eos = torch.arange(models[0].config.decoder_vocab_size, device=device) != s.eos  # (vocab,), built once
    every = 1 if s.synced_gpus else done_check_interval(device)  # steps between reads of which sentences are done
    step, searching, stored = 0, input_ids.shape[0] > 0, None
    while True:
        step += 1
        if not searching:  # synced_gpus: this process's sentences are done, others' are not
            for decoder in decoders:
                decoder.idle_step()
        else:
            log_probs = _score(decoders, state, step, dtype, s.ensemble_average)
            if trail is not None:
                trail.record(decoders[0].recorded, state)
            log_probs, at_limit = _allowed(log_probs, state, step, rules, step >= shortest, not_eos)
            if s.num_beams == 1 and constraints is None:
                done, parents = _greedy_step(state, log_probs, step, s, stored), None
            else:
                if constraints is None:
                    candidates = search.step(state.scores, log_probs)
                else:
                    constraints.ban_unmet_eos(log_probs, s.eos)
                    candidates = constraints.step(state.scores, log_probs)
                state.finish(*candidates, step, s, stored)
                scores, parents, words = search.live_on(*candidates)
                done = at_limit | _search_done(state, scores.max(-1).values, step, s)
                state.live_on(scores, parents, words, step)
                if constraints is not None:
                    constraints.live_on(parents, words)
            check = step % every == 0 or step >= longest  # past `longest` neither the cache nor the books reach
            searching, stored = _drop_done(state, hypotheses, decoders, parents, done, constraints, stored, check)
        if not (_anyone_searching(searching, device) if s.synced_gpus else searching):
            break
    return hypotheses.best(s.returned, trail)


def _score(decoders: list, state: SearchState, step: int, dtype: torch.dtype, average: str) -> torch.Tensor:
    """The phase that runs the model: (n, k, vocab) next-token log-probabilities of the live beams (of an
    ensemble: its models' combined, see `ensemble_log_probs`)."""
    n, k = state.sentence.shape[0], state.k
    if len(decoders) == 1:
        return decoders[0].log_probs(state.history, step, dtype).view(n, k, -1)
    each = [decoder.log_probs(state.history, step, dtype) for decoder in decoders]
    return ensemble_log_probs(each, average).view(n, k, -1)


def _allowed(log_probs, state: SearchState, step: int, rules: TokenRules, maybe_at_limit: bool, not_eos):
    """The phase that bans what a hypothesis may not take next: the token rules, then the target prefix (its token
    is the only choice; the limits leave room for it and eos), then eos as the only choice at a sentence's limit.
    Returns the log-probabilities and which sentences are at their limit, (n,)."""
    at_limit = step >= state.limits  # (n,)
    prefix = state.prefix
    forcing = prefix is not None and step <= prefix.shape[1]
    raw = log_probs.clone() if forcing else None
    log_probs = rules.apply(log_probs, state.history, step, at_limit)
    if forcing:
        token = prefix[:, step - 1].clamp(min=0)[:, None, None].expand(*log_probs.shape[:2], 1)  # (n, k, 1)
        only = torch.full_like(log_probs, -math.inf).scatter_(2, token, raw.gather(2, token))
        log_probs = torch.where((prefix[:, step - 1] >= 0)[:, None, None], only, log_probs)
    if maybe_at_limit:  # before the shortest limit, no sentence is at its limit
        log_probs = torch.where(at_limit[:, None, None] & not_eos, -math.inf, log_probs)
    return log_probs, at_limit


def _greedy_step(state: SearchState, log_probs, step: int, settings: SearchSettings, frozen=None) -> torch.Tensor:
    """Greedy decoding's choose-and-finish phase, as tensor2tensor decodes with beam size 1: the likeliest token;
    eos ends the hypothesis (at the limit eos is the only choice). `frozen` (n,): sentences done at an earlier step
    since the last check, whose finished hypothesis stays as it was. Returns which sentences are done, (n,)."""
    value, word = log_probs[:, 0].max(dim=-1)  # (n,)
    state.scores = state.scores + value[:, None]
    state.history[:, step] = word
    done = word == settings.eos
    ends = done if frozen is None else done & ~frozen  # the hypotheses that end here
    normalized = state.scores / length_penalty(step, settings.alpha, settings.normalization)
    state.finished = torch.where(ends[:, None], normalized, state.finished)
    state.finished_tokens = torch.where(ends[:, None, None], state.history[:, None], state.finished_tokens)
    state.finished_lengths = state.finished_lengths.masked_fill(ends[:, None], step)
    if state.finished_rows is not None:
        rows = torch.arange(done.shape[0], device=done.device)
        state.rows_before = rows
        state.finished_rows = torch.where(ends[:, None], rows[:, None], state.finished_rows)
    return done


def _drop_done(state: SearchState, hypotheses: Hypotheses, decoders: list, parents, done, constraints=None,
               stored=None, check: bool = True):  # fmt: skip
    """The phase that ends sentences: the done ones' hypotheses are stored and they leave the state and every
    model's cache, which also learn the beams' parents. Between checks (`check` false: no host read; see
    `done_check_interval`) done sentences stay in the batch with their finished hypotheses as they were at the step
    they were done (the finishing phases keep them: `stored` (n,) says which) until the next check stores them and
    drops them. Returns whether any sentence is still searched, and `stored`."""
    if not check:
        for decoder in decoders:
            decoder.next_step(parents, None)
        return True, done if stored is None else stored | done
    # the one host read of the step (at a check); the indices below are built from it on the host
    leaving = (done if stored is None else done | stored).tolist()
    device, searching, keep = done.device, True, None
    if any(leaving):
        hypotheses.store(state, torch.tensor([i for i, flag in enumerate(leaving) if flag], device=device))
        searching = not all(leaving)
        if searching:
            kept = [i for i, flag in enumerate(leaving) if not flag]
            keep = torch.tensor(kept, device=device)  # (m,)
            state.keep(keep)
            if constraints is not None:
                constraints.keep(kept)
    if searching:
        for decoder in decoders:
            decoder.next_step(parents, keep)
    return searching, None


def ensemble_log_probs(each: list[torch.Tensor], average: str) -> torch.Tensor:
    """The ensemble's next-token scores from its models' log-probabilities: their mean ("log_probs", OpenNMT's
    default), or the log of the mean probability ("probs", what fairseq's EnsembleModel computes)."""
    stacked = torch.stack(each)
    if average == "probs":
        return torch.logsumexp(stacked, dim=0) - math.log(len(each))
    return stacked.mean(dim=0)


def _search_done(state: SearchState, best_live, step: int, settings: SearchSettings) -> torch.Tensor:
    """(n,) whether each sentence's search may stop, by its early-stopping rule (`policy_aayn.search_done`)."""
    alpha, normalization = settings.alpha, settings.normalization
    largest_lp = state.largest_lp  # alpha >= 0: at the sentence's limit, computed at the start
    if largest_lp is None and settings.early_stopping not in (True, False):
        largest_lp = largest_length_penalty(state.limits, step, alpha, normalization, settings.min_step)
    return search_done(state.finished, best_live, step, alpha, normalization, settings.early_stopping,
                       settings.returned, largest_lp)  # fmt: skip


def _anyone_searching(searching: bool, device: torch.device) -> bool:
    """synced_gpus: whether any process still searches (a collective every step, as transformers' search)."""
    import torch.distributed as dist

    flag = torch.tensor([1.0 if searching else 0.0], device=device)
    dist.all_reduce(flag)
    return flag.item() > 0
