"""The engine interface every translator meets, whatever it runs on, as a template: `aayn translate`, `aayn score`,
`aayn evaluate`, `aayn serve` and the benchmarks call `nbest`, `translate` and `score`, which encode the texts, cut
batches of similar length (`aayn.data.token_batches`), hand each to the engine and put the answers back in input
order, with a progress bar. An engine implements `encode` and one batch decode, `decode_batch`, reading one
`DecodingSettings` value resolved once per call from its folder's generation config (and `score_batch` where it
scores pairs).

Engines: `aayn.formats.aayn.engine.TorchTranslator` (saved aayn models, one or an ensemble, with the paper's search),
`aayn.formats.ctranslate2.engine.ExportedModel` (CTranslate2), `aayn.formats.onnx.engine.OnnxTranslator` (ONNX Runtime)
and `aayn.serve.WorkerTranslator` (another engine in a process of its own); `aayn.formats` names which opens a
folder. Only `aayn.model.policy_aayn` is imported here (it imports nothing), and numpy on first use.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..model.policy_aayn import (
    LENGTH_NORMALIZATIONS,
    STOPPING_RULES,
    beams_for,
    length_penalty_in_force,
    sentence_length_limit,
)
from ..model.policy_aayn import length_penalty as penalty_of_length

DECODING_BATCH_TOKENS = 4096  # padded source tokens a decoding (or scoring) batch holds by default

# what a caller may ask of a translator beyond translating (target prefixes, drawing attention, scoring pairs,
# glossaries: target terms each translation must contain, word alignments), each with how a user of the command line
# asks for it (ABILITIES) and what a server's client is told it lacks (LACKS): one row per ability in each, the
# tables behind every "cannot do that" message
ABILITIES = {
    "prefixes": "--prefix",
    "attention": "--show_attention",
    "scores": "scoring pairs",
    "glossary": "--glossary",
    "alignment": "--print_alignment",
    "sampling": "--sampling",
}
LACKS = {
    "prefixes": "translates without target prefixes",
    "attention": "shows no attention",
    "scores": "scores no given pairs",
    "glossary": "translates without a glossary",
    "alignment": "gives no alignments",
    "sampling": "does not sample",
}


class EngineOptions(NamedTuple):
    """How an engine computes beside its device, as the command line's `--dtype`, `--cuda_graphs` and
    `--compiled_steps` ask: the type its weights are cast to (None: as the folder holds them), whether its decoder's
    steps are replayed from CUDA graphs, whether they are compiled by torch.compile. A format says which it offers
    (`Format.dtypes`, `Format.cuda_graphs`, `Format.compiled_steps`); the others are refused in one line before
    anything is loaded (`opening.translator_format`)."""

    dtype: str | None = None
    cuda_graphs: bool = False
    compiled_steps: bool = False


AS_SAVED = EngineOptions()  # an engine's defaults: the folder's weights as they are, steps launched one by one


@dataclass(frozen=True)
class Sampling:
    """Each token drawn from the model's distribution instead of searched for (fairseq's `--sampling`; Edunov et
    al. 2018 found sampled back-translations train better than beam search's, given much parallel data): among the
    `top_k` likeliest tokens (0: all), within the smallest set holding `top_p` of the probability (1: all), at
    `temperature`. `seed` starts the draws of each call, so that the same texts in the same batches draw the same
    translations."""

    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"sampling's top_k must be an integer >= 0 (0: every token), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling's top_p must be in (0, 1], got {self.top_p!r}")
        if not 0 < self.temperature < math.inf:
            raise ValueError(f"sampling's temperature must be positive, got {self.temperature!r}")

    def for_shard(self, name: str) -> Sampling:
        """The draws of one shard of a corpus, seeded by `seed` and the shard's name alone: a rerun after a kill,
        another process or another Ray actor draws the same text for it."""
        digest = hashlib.sha256(f"{self.seed}:{name}".encode()).digest()
        return replace(self, seed=int.from_bytes(digest[:4], "little"))


def without(name: str, ability: str, what: str = "") -> str:
    """The one line saying that the model `name` (`what`: which kind it is, if not an aayn folder) lacks
    `ability`, for the command line."""
    where = "give the aayn folder it was exported from for that" if what else "give an aayn model folder for that"
    return f"--model {name}{what}: it translates without {ABILITIES[ability]}; {where}"


def lacking(name: str, ability: str) -> str:
    """The same line for a server's client, who asked in a request (no flag to name)."""
    return f"{name} {LACKS[ability]} (its engine has none)"


class TextError(ValueError):
    """An input that no engine can take, in one line: `index` (0-based) among the texts given, and why (`reason`),
    so that each caller names it its own way (a request's text, a file's line, a shard's row)."""

    def __init__(self, index: int, reason: str, kind: str = "input"):
        super().__init__(f"{kind} {index + 1} {reason}")
        self.index, self.reason = index, reason


def unreadable(text: str) -> str | None:
    """Why `text` is not Unicode text a tokenizer takes (a lone surrogate: a JSON escape such as "\\ud800", or an
    undecodable byte let through by Python's surrogateescape), or None. Every other character, NUL and the
    control characters included, is text the model translates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        position, code = error.start + 1, ord(text[error.start])
        return (f"holds a lone surrogate U+{code:04X} at character {position} (half of a UTF-16 pair, or a byte "
                "that is not UTF-8): not Unicode text")  # fmt: skip
    return None


def check_texts(texts: list[str], kind: str = "input") -> None:
    """TextError for the first text no engine can take (`kind`: what the message calls a text)."""
    for index, text in enumerate(texts):
        reason = unreadable(text)
        if reason is not None:
            raise TextError(index, reason, kind)


# one input's best translations as (score, text), best first; asked for alignments, (score, text, Alignment)
Hypotheses = list[tuple]


@dataclass(frozen=True)
class DecodingSettings:
    """One search, as every engine's batch decode reads it: the beam size (1: greedy), alpha, how many hypotheses
    each input returns, a cap on new tokens within the length limit (None: the limit alone), and the rules the
    folder states (`aayn.model.policy_aayn.FOLDER_RULES`): lp(Y) (GNMT's or fairseq's), the length limit per sentence
    ([a, b]: a * |x| + b tokens before eos; None: §6.1's |x| + 50) and the stopping rule ("never": exact; True:
    once k hypotheses finished; False: transformers' heuristic). An engine runs these or refuses in one line."""

    num_beams: int
    length_penalty: float
    nbest: int = 1
    max_new_tokens: int | None = None
    normalization: str = "gnmt"  # the folder's `length_normalization`: GNMT's lp or fairseq's |Y|^alpha
    length_limit: tuple[float, int] | None = None  # the folder's `length_limit`
    early_stopping: bool | str = "never"  # the folder's `search_early_stopping`
    min_new_tokens: int = 0  # the generation config's: tokens before eos may end a hypothesis (fairseq's --min-len)
    sampling: Sampling | None = None  # tokens drawn, not searched for: one beam, `nbest` samples of each source

    @classmethod
    def resolve(
        cls,
        generation: dict,
        nbest: int = 1,
        *,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        max_new_tokens: int | None = None,
        sampling: Sampling | None = None,
    ) -> DecodingSettings:
        """The settings in force: those given, else the folder's (`generation`: its generation config's
        `num_beams` and `length_penalty`, and the rules of its model config), else transformers' defaults; at least
        `nbest` beams. ValueError names a bad value."""
        for name, value, smallest in (("nbest", nbest, 1), ("num_beams", num_beams, 1),
                                      ("max_new_tokens", max_new_tokens, 1)):  # fmt: skip
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < smallest):
                raise ValueError(f"{name} must be an integer >= {smallest}, got {value!r}")
        alpha = length_penalty_in_force(length_penalty, generation.get("length_penalty"))
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
            raise ValueError(f"length_penalty must be a finite number, got {alpha!r}")
        if sampling is not None and num_beams not in (None, 1):
            raise ValueError(f"sampling draws one token at a time; num_beams {num_beams} searches: give one of them")
        beams = 1 if sampling is not None else beams_for(num_beams or generation.get("num_beams"), nbest)
        normalization = generation.get("length_normalization") or "gnmt"
        if normalization not in LENGTH_NORMALIZATIONS:
            raise ValueError(f"length_normalization must be one of {LENGTH_NORMALIZATIONS}, got {normalization!r}")
        rule = generation.get("length_limit")
        if rule is not None:
            if not (isinstance(rule, (list, tuple)) and len(rule) == 2 and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in rule)):  # fmt: skip
                raise ValueError(f"length_limit must be [a, b] (a * source + b tokens), got {rule!r}")
            rule = (float(rule[0]), int(rule[1]))
        stopping = generation.get("search_early_stopping")
        stopping = "never" if stopping is None else stopping
        if stopping not in STOPPING_RULES:
            raise ValueError(f"search_early_stopping must be one of {STOPPING_RULES}, got {stopping!r}")
        least = generation.get("min_new_tokens") or 0
        if isinstance(least, bool) or not isinstance(least, int) or least < 0:
            raise ValueError(f"min_new_tokens must be an integer >= 0, got {least!r}")
        return cls(beams, float(alpha), nbest, max_new_tokens, normalization, rule, stopping, least, sampling)

    def limits(self, source_lengths):
        """Each sentence's most target tokens, eos counted (an int, or an array or tensor of source lengths): the
        folder's length limit within `max_new_tokens`, at least 1."""
        limits = sentence_length_limit(source_lengths, self.length_limit)
        if self.max_new_tokens is None:
            return limits
        if isinstance(limits, int):
            return max(min(limits, self.max_new_tokens), 1)
        return limits.clip(max=self.max_new_tokens).clip(min=1)


@dataclass
class Score:
    """One pair's score: `log_prob` = log P(target | source), eos included; `score` = log_prob / lp(|Y|) with
    GNMT's lp(|Y|) = ((5 + |Y|) / 6)^alpha (fairseq's |Y|^alpha for a folder whose `length_normalization` says so),
    |Y| counting eos (what the search ranks its own outputs by);
    `tokens`: the log-probability of each target token, eos last (empty unless asked for); `alignment`: the
    pair's `aayn.formats.alignment.Alignment` where asked for."""

    log_prob: float
    score: float
    tokens: list[float] = field(default_factory=list)
    alignment: object = None


def with_token(token: str, texts: list[str]) -> list[str]:
    """`texts`, each that is not blank led by a multi-target model's target-language `token` ("" for none)."""
    return [f"{token} {text}" if token and text.strip() else text for text in texts]


def without_token(token: str, best: list) -> list:
    """The hypotheses of texts led by `token` (one or several language tokens), their alignments (a third element)
    read on the text alone: the tokens' links dropped, the other source positions as many less."""
    if not token:
        return best
    led = token.split()
    for hypotheses in best:
        for k, hypothesis in enumerate(hypotheses):
            if len(hypothesis) > 2 and hypothesis[2].source_tokens[: len(led)] == led:
                alignment, n = hypothesis[2], len(led)
                links = [(source - n, target, weight) for source, target, weight in alignment.links if source >= n]
                alignment = type(alignment)(links, alignment.source_tokens[n:], alignment.target_tokens)
                hypotheses[k] = (*hypothesis[:2], alignment, *hypothesis[3:])
    return best


class Translator:
    """n-best translations (and, with the "scores" ability, scores) of texts. An engine sets `name` (what
    --model named), `generation` (its folder's generation config as a dict), `source_limit` (the most source
    tokens it reads) and `abilities`, and implements `encode` and `decode_batch`."""

    name: str = "the model"
    kind: str = "aayn"  # what /health calls the engine
    abilities: frozenset = frozenset()
    generation: dict = {}
    source_limit: int = 1 << 62
    target_token: str = ""  # a multi-target model's token for the target, put before each text (`>>fr<<`)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Source token ids of each text, eos-terminated, as the model was trained on them."""
        raise NotImplementedError

    def decode_batch(
        self,
        sources: list[list[int]],
        settings: DecodingSettings,
        prefixes: list[str] | None,
        terms=None,
        alignment=None,
    ) -> list[Hypotheses]:
        """The `settings.nbest` best hypotheses of each source of one batch (similar lengths, at most the batch
        budget); `prefixes`: a target prefix per source ("" for none), where the engine has that ability;
        `terms=` (given only with the "glossary" ability): the target terms each translation must contain;
        `alignment=` (`aayn.formats.alignment.AlignmentSettings`, only with the "alignment" ability): each
        hypothesis comes with its `Alignment` as a third element."""
        raise NotImplementedError

    def settings(self, nbest: int = 1, **given) -> DecodingSettings:
        """The search this translator runs for `given` (`num_beams`, `length_penalty`, `max_new_tokens`,
        `sampling`)."""
        return DecodingSettings.resolve(self.generation, nbest, **given)

    def reseed(self, seed: int) -> None:
        """Start the engine's random draws from `seed` (engines with the "sampling" ability)."""
        raise NotImplementedError

    def nbest(
        self,
        texts: list[str],
        nbest: int = 1,
        *,
        batch_tokens: int = DECODING_BATCH_TOKENS,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        max_new_tokens: int | None = None,
        prefixes: list[str] | None = None,
        glossary=None,
        alignment=None,
        sampling: Sampling | None = None,
        progress: str | None = None,
    ) -> list[Hypotheses]:
        """Per input, in input order, the `nbest` best hypotheses as (score, text), ranked as the search ranks
        them. Sentences of similar length are batched up to `batch_tokens` padded source tokens (the training
        batch sampler, unshuffled), so the batches, and with them the length limits, are the same on every
        engine. An empty or blank line gives one empty hypothesis with score 0. `prefixes` (one per input, "" for
        none): target prefixes each translation continues from. `glossary` (`aayn.model.glossary_aayn.Glossary`): the
        target terms of the source terms each input contains must appear in its translations. `alignment`
        (`aayn.formats.alignment.AlignmentSettings`): each hypothesis is (score, text, `Alignment`). `progress`: a
        description for a progress bar over the sentences on stderr, shown once the work has taken a second.
        `sampling` (`Sampling`): each token drawn, the draws started from its seed."""
        check_texts(texts)
        settings = self.settings(nbest, num_beams=num_beams, length_penalty=length_penalty,
                                 max_new_tokens=max_new_tokens, sampling=sampling)  # fmt: skip
        if sampling is not None:
            if "sampling" not in self.abilities:
                raise ValueError(without(self.name, "sampling"))
            self.reseed(sampling.seed)
        if prefixes is not None:
            if "prefixes" not in self.abilities:
                raise ValueError(without(self.name, "prefixes"))
            if len(prefixes) != len(texts):
                message = f"{len(prefixes)} prefixes for {len(texts)} inputs: one prefix (or an empty line) per input"
                raise ValueError(message)
        terms = None
        if glossary is not None and glossary.entries:
            if "glossary" not in self.abilities:
                raise ValueError(without(self.name, "glossary"))
            terms = [glossary.terms_for(text) for text in texts]
        extra = {}
        if alignment is not None:
            if "alignment" not in self.abilities:
                raise ValueError(without(self.name, "alignment"))
            from .alignment import Alignment

            extra["alignment"] = alignment
        blank = (0.0, "", Alignment()) if alignment is not None else (0.0, "")
        outputs: list[Hypotheses] = [[blank] for _ in texts]
        led = with_token(self.target_token, texts)
        for todo, batch, sources in self._batches(led, batch_tokens, progress):
            chosen = None if prefixes is None else [prefixes[todo[j]] for j in batch]
            batch_terms = None if terms is None else [terms[todo[j]] for j in batch]
            extra.pop("terms", None)
            if batch_terms and any(batch_terms):
                extra["terms"] = batch_terms
            try:
                decoded = self.decode_batch(sources, settings, chosen, **extra)
            except TextError as error:  # an engine names a text by its place in the batch
                raise TextError(todo[batch[error.index]], error.reason) from None
            for j, hypotheses in zip(batch, decoded):
                outputs[todo[j]] = hypotheses
        return without_token(self.target_token, outputs)

    def translate(self, texts: list[str], **options) -> list[str]:
        """The best translation of each text, in input order (an empty or blank line: an empty line)."""
        return [hypotheses[0][1] for hypotheses in self.nbest(texts, 1, **options)]

    def _batches(self, texts: list[str], batch_tokens: int, progress: str | None):
        """(the indices of the texts that are not blank, a batch of positions in that list, their token ids), batch
        by batch, with the progress bar."""
        from ..data.token_batches import decoding_batches, encode_sources

        todo, encoded = encode_sources(self.encode, texts, self.source_limit)
        bar = progress_bar(len(todo), progress)
        for batch in decoding_batches([len(ids) for ids in encoded], batch_tokens) if todo else []:
            yield todo, batch, [encoded[j] for j in batch]
            if bar is not None:
                bar.update(len(batch))
        if bar is not None:
            bar.close()

    # scoring given pairs: engines with the "scores" ability implement `encode_targets` and `score_batch`

    def encode_targets(self, texts: list[str]) -> list[list[int]]:
        """Target token ids of each text, eos-terminated, as in training (the target side of the tokenizer)."""
        raise NotImplementedError

    def score_batch(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        """Per pair of one batch, the log-probability of each target token (teacher-forced), eos last."""
        raise NotImplementedError

    def best_ids(self, sources: list[list[int]], settings: DecodingSettings) -> list[list[int]]:
        """Per source (token ids), the best hypothesis' target ids, without the start token, eos and padding:
        what the decoding bench compares across engines."""
        raise NotImplementedError

    def align_batch(self, sources: list[list[int]], targets: list[list[int]], settings) -> list:
        """Per pair of one batch, its `aayn.formats.alignment.Alignment` (teacher-forced; the "alignment"
        ability)."""
        raise NotImplementedError

    def score(
        self,
        sources: list[str],
        targets: list[str],
        *,
        length_penalty: float | None = None,
        per_token: bool = False,
        batch_tokens: int = DECODING_BATCH_TOKENS,
        alignment=None,
    ) -> list[Score]:
        """Scores of the pairs (sources[i], targets[i]) in input order (fairseq's `--score-reference`);
        `length_penalty` is alpha (default: the folder's generation config's); `alignment`
        (`aayn.formats.alignment.AlignmentSettings`): each `Score` carries the pair's `Alignment`
        (teacher-forced)."""
        from ..data.token_batches import decoding_batches

        if "scores" not in self.abilities:
            raise ValueError(without(self.name, "scores"))
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets: scoring needs one target per source")
        check_texts(sources, "source")
        check_texts(targets, "target")
        search = self.settings(length_penalty=length_penalty)
        alpha = search.length_penalty
        source_ids, target_ids = self.encode(list(sources)), self.encode_targets(list(targets))
        lengths = [max(len(s), len(t)) for s, t in zip(source_ids, target_ids)]
        scores: list[Score | None] = [None] * len(sources)
        if alignment is not None and "alignment" not in self.abilities:
            raise ValueError(without(self.name, "alignment"))
        for batch in decoding_batches(lengths, batch_tokens):
            pair = [source_ids[i] for i in batch], [target_ids[i] for i in batch]
            rows = self.score_batch(*pair)
            aligned = self.align_batch(*pair, alignment) if alignment is not None else [None] * len(batch)
            for i, tokens, links in zip(batch, rows, aligned):
                total = math.fsum(tokens)
                lp = penalty_of_length(len(tokens), alpha, search.normalization)
                scores[i] = Score(total, total / lp, tokens if per_token else [])
                scores[i].alignment = links
        return scores


def progress_bar(total: int, description: str | None):
    """A progress bar over `total` sentences on stderr, shown once the work has taken a second (None: no bar)."""
    if description is None:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit=" sentences", delay=1.0, leave=False)
