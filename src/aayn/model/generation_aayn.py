"""How `generate()` reaches §6.1's search (`search_aayn.py`): which generation options it serves, their values
checked and turned into `SearchSettings`, the per-sentence length limits and target prefixes, what
`return_dict_in_generate` adds, and what goes to transformers' own `generate` instead.

This file travels with every saved checkpoint (the model file imports it): it imports only torch and transformers.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math

import torch
from torch.nn import functional as F
from transformers import GenerationConfig
from transformers.generation.utils import GenerateBeamEncoderDecoderOutput
from transformers.utils import logging

from .compat_aayn import output_vocabulary
from .constraints_aayn import ConstrainedSearch
from .decoding_aayn import graphed_steps
from .ops_aayn import cpu_decoding_layout
from .policy_aayn import (
    LENGTH_NORMALIZATIONS,
    alignment_in_force,
    length_penalty_in_force,
    paper_length_limit,
    returned_fault,
    sentence_length_limit,
)
from .search_aayn import SearchSettings, paper_search

logger = logging.get_logger(__name__)


# generation options the paper's search serves (`generate` reads them from its arguments and the generation config)
SERVED = {
    "num_beams", "length_penalty", "max_new_tokens", "max_length", "min_new_tokens", "min_length",
    "no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "early_stopping", "use_cache",
    "return_dict_in_generate", "output_scores", "output_logits", "output_attentions", "output_hidden_states",
    "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "do_sample", "synced_gpus",
    "length_normalization",
}  # fmt: skip
# sampling's knobs: without do_sample transformers ignores them (and warns); so does the paper's search
SAMPLING_ONLY = {"temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff"}
# arguments of `generate` itself (not generation config fields); anything else not None goes to transformers
MODEL_INPUTS = {"input_ids", "attention_mask", "synced_gpus", "decoder_input_ids", "decoder_attention_mask"}
OUTPUT_OPTIONS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")


@functools.cache
def transformers_generation_defaults() -> dict:
    """transformers' default generation values (4.57's defaults, which 5.x keeps aside and reads as unset)."""
    default = GenerationConfig()
    values = default.to_dict()
    if hasattr(default, "_get_default_generation_params"):  # transformers 5.x
        values.update(default._get_default_generation_params())
    return values


def _given(config: GenerationConfig, passed: set[str]) -> dict:
    """The generation values in force that the user set: passed to `generate`, or in the generation config with a
    value other than transformers' default (transformers cannot tell the two apart either)."""
    defaults = transformers_generation_defaults()
    values = {}
    for key, value in config.to_dict().items():
        if key.startswith("_") or key == "transformers_version" or value is None:
            continue
        if key in passed or value != defaults.get(key):
            values[key] = value
    return values


def resolve_options(base: GenerationConfig, kwargs: dict) -> tuple[GenerationConfig, dict, set]:
    """The generation values in force for one call of `generate` or `generate_ensemble`: a copy of `base` updated
    with the keyword arguments passed (not None); those the user set (`_given`); and the options the paper's search
    does not serve (anything else than SERVED and the sampling knobs, and unknown keywords)."""
    config = copy.deepcopy(base)
    passed = {key for key, value in kwargs.items() if value is not None}
    if "length_normalization" in passed:  # aayn's own field: transformers' config has no attribute for it
        config.length_normalization = kwargs["length_normalization"]
    unused = config.update(**{key: kwargs[key] for key in passed - {"length_normalization"}})
    given = _given(config, passed - set(unused))
    others = (set(given) - SERVED - SAMPLING_ONLY) | (set(unused) - MODEL_INPUTS)
    if given.get("forced_eos_token_id") in (None, config.eos_token_id):  # the search forces eos at a limit anyway
        others.discard("forced_eos_token_id")
    return config, given, others


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
    alpha = length_penalty_in_force(None, config.length_penalty)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise ValueError(f"`length_penalty` must be a finite number, got {alpha!r}")
    returned = _whole("num_return_sequences", config.num_return_sequences or 1, 1)  # None: 4.57's default
    fault = returned_fault(returned, beams)
    if fault:
        raise ValueError(fault)
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
    # a generation value, else the model config's (transformers 5 drops unknown generation config fields on load)
    normalization = given.get("length_normalization", getattr(model_config, "length_normalization", None) or "gnmt")
    if normalization not in LENGTH_NORMALIZATIONS:
        raise ValueError(f"`length_normalization` must be one of {LENGTH_NORMALIZATIONS}, got {normalization!r}")
    early = given.get("early_stopping", getattr(model_config, "search_early_stopping", None) or "never")
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
        normalization=normalization,
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


def length_limits(
    attention_mask: torch.Tensor, given: dict, forced: torch.Tensor | None = None, rule=None
) -> torch.Tensor:
    """Per sentence, §6.1's limit (source length + 50 target tokens) within `max_new_tokens` or `max_length`
    (transformers counts the decoder start token in the latter; `max_new_tokens` wins where both are given, as
    there). With a target prefix of `forced` tokens (batch,), `max_new_tokens` counts the tokens after it (as
    transformers counts new tokens after a prompt), and every limit leaves room for the prefix and eos. `rule`
    (a model config's `length_limit`, [a, b]: fairseq's --max-len-a, --max-len-b) replaces §6.1's limit with a *
    source + b tokens before eos (an imported fairseq folder's: fairseq's default, 200 whatever the source)."""
    limits = sentence_length_limit(attention_mask.sum(-1), rule)
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
    |Y|^alpha), with one warning naming what did not fit the paper's search. aayn's own keywords, taken out before
    transformers sees them: `constraints` / `ordered_constraints` (target phrases each output holds) and
    `output_alignments` / `alignment_layer` / `alignment_heads` (each token's attention, kept by the search) and
    `cuda_graphs` / `compiled_steps` (the decoder's steps with static shapes, replayed from CUDA graphs or compiled
    by torch.compile, `aayn.formats.aayn.cuda_graphs`)."""
    base = model.generation_config if generation_config is None else generation_config
    paper = model.config.paper_decoding if paper_decoding is None else paper_decoding
    kwargs.pop("labels", None)  # Seq2SeqTrainer's predict_with_generate passes them along
    phrases = _pop_constraints(kwargs)  # before transformers sees them: some of its lines have a field of that name
    alignment, steps = _pop_alignment(kwargs, model.config), _pop_steps(kwargs)
    with cpu_decoding_layout(model):
        if not paper:
            kwargs.pop("length_normalization", None)  # transformers' search has its own (|Y|^alpha)
            _only_in_paper_search(phrases, alignment, "paper_decoding=False", steps)
            with output_vocabulary(model.config):
                return parent_generate(inputs, generation_config=generation_config, **kwargs)
        config, given, others = resolve_options(base, kwargs)
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if input_ids is None:
            others.add("inputs_embeds" if kwargs.get("inputs_embeds") is not None else "no input_ids")
        if config.do_sample or others:
            _only_in_paper_search(phrases, alignment, str(sorted(others) or ["do_sample=True"]), steps)
            return _transformers_search(model, inputs, generation_config, parent_generate, given, others, kwargs)
        return _paper_generate([model], config, given, input_ids, kwargs, constraints=phrases, alignment=alignment,
                               steps=steps)  # fmt: skip


def _only_in_paper_search(phrases, alignment, why: str, steps: dict | None = None) -> None:
    """ValueError where constraints, alignments, CUDA graphs or compiled steps are asked of transformers' search
    (`why` names what chose it)."""
    asked = [name for name, value in (("constraints", phrases), ("output_alignments", alignment)) if value is not None]
    asked += [name for name, wanted in (steps or {}).items() if wanted]
    if asked:
        raise ValueError(f"{' and '.join(asked)} need the paper's search: not with {why}")


def _pop_alignment(kwargs: dict, config) -> tuple[int, int] | None:
    """`output_alignments` (fairseq's `--print-alignment`) with `alignment_layer` and `alignment_heads` taken out of
    `generate`'s keywords: (layer, heads) in force where asked, else None."""
    wanted = kwargs.pop("output_alignments", False)
    layer, heads = kwargs.pop("alignment_layer", None), kwargs.pop("alignment_heads", None)
    if not isinstance(wanted, bool):
        raise ValueError(f"`output_alignments` must be True or False, got {wanted!r}")  # noqa: TRY004  as transformers
    if not wanted:
        if layer is not None or heads is not None:
            raise ValueError("`alignment_layer` and `alignment_heads` choose the attention of output_alignments=True")
        return None
    return alignment_in_force(config.decoder_layers, config.decoder_attention_heads, layer, heads)


STEP_OPTIONS = ("cuda_graphs", "compiled_steps")  # generate()'s keywords of how the decoder's steps run


def _pop_steps(kwargs: dict) -> dict[str, bool]:
    """How the decoder's steps after the first run, taken out of `generate`'s keywords: `cuda_graphs` (with
    static shapes, replayed from a CUDA graph on CUDA, eagerly elsewhere; `aayn.formats.aayn.cuda_graphs`) and
    `compiled_steps` (the same static steps compiled by torch.compile: `cuda_graphs.compiled_static_step`), each
    True or False."""
    steps = {name: kwargs.pop(name, False) for name in STEP_OPTIONS}
    for name, wanted in steps.items():
        if not isinstance(wanted, bool):
            raise ValueError(f"`{name}` must be True or False, got {wanted!r}")  # noqa: TRY004  as transformers
    if any(steps.values()):
        graphed_steps()  # refused before any work where aayn is not installed
    return steps


def _pop_constraints(kwargs: dict):
    """`constraints` (one list of target phrases per input sentence, each phrase a list of token ids) and
    `ordered_constraints` taken out of `generate`'s keywords: None where no sentence has a phrase."""
    phrases, ordered = kwargs.pop("constraints", None), kwargs.pop("ordered_constraints", False)
    if not isinstance(ordered, bool):
        raise ValueError(f"`ordered_constraints` must be True or False, got {ordered!r}")  # noqa: TRY004  as transformers
    if phrases is None:
        return None
    if not isinstance(phrases, (list, tuple)) or not all(
        isinstance(each, (list, tuple)) and all(isinstance(phrase, (list, tuple)) for phrase in each)
        for each in phrases
    ):
        raise ValueError("`constraints` must hold one list of phrases (lists of token ids) per input sentence")
    if not any(phrases):
        return None
    return [[list(phrase) for phrase in each] for each in phrases], ordered


def _constrained_search(constraints, settings: SearchSettings, vocab: int, limits: torch.Tensor, batch: int):
    """The constraint states for `paper_search`, the phrases checked against the batch, the vocabulary, the
    special tokens and the length limits (ValueError naming the sentence)."""
    phrases, ordered = constraints
    if len(phrases) != batch:
        raise ValueError(f"`constraints` has {len(phrases)} lists of phrases for {batch} input sentences")
    for i, (each, limit) in enumerate(zip(phrases, limits.tolist())):
        for phrase in each:
            if not phrase or not all(_is_token(t, vocab) and t not in (settings.eos, settings.pad) for t in phrase):
                raise ValueError(
                    f"constraint {phrase!r} of sentence {i}: a phrase is a non-empty list of token ids < {vocab}, "
                    f"without eos ({settings.eos}) or pad ({settings.pad})"
                )
        if sum(map(len, each)) > limit - 1:
            raise ValueError(
                f"the constraints of sentence {i} hold {sum(map(len, each))} tokens: more than its length limit "
                f"({limit} tokens, eos included) leaves room for"
            )
    return ConstrainedSearch(phrases, settings.num_beams, ordered)


def _paper_generate(
    models: list,
    config: GenerationConfig,
    given: dict,
    input_ids,
    kwargs: dict,
    average=None,
    constraints=None,
    alignment=None,
    steps: dict | None = None,
):
    """The paper's search for one model or an ensemble, with the generation values in force. `alignment` (layer,
    heads): the output's `alignments` holds each hypothesis's attention, token by token (`paper_search`; one
    teacher-forced forward where the model cannot record it during the search: no cache, other attention kernels).
    `steps`: how the decoder's steps run (`_pop_steps`)."""
    if set(given) & SAMPLING_ONLY:
        ignored = sorted(set(given) & SAMPLING_ONLY)
        logger.warning_once(f"{ignored} only apply to sampling (do_sample=True): ignored, as transformers does")
    model = models[0]
    settings = search_settings(model, config, given, kwargs.get("synced_gpus") or False)
    if average is not None:
        settings.ensemble_average = average
    if alignment is not None and not config.return_dict_in_generate:
        raise ValueError("output_alignments=True returns them beside the sequences: needs return_dict_in_generate=True")
    settings.alignment = alignment
    steps = steps or {}
    settings.cuda_graphs, settings.compiled_steps = steps.get("cuda_graphs", False), steps.get("compiled_steps", False)
    attention_mask = source_mask(input_ids, kwargs.get("attention_mask"), settings.pad, settings.eos)
    prefix = forced = None
    if kwargs.get("decoder_input_ids") is not None:
        vocab = model.config.decoder_vocab_size
        prefix, forced = target_prefix(
            kwargs["decoder_input_ids"], kwargs.get("decoder_attention_mask"), settings, vocab
        )
        prefix, forced = prefix.to(input_ids.device), forced.to(input_ids.device)
    limits = length_limits(attention_mask, given, forced, getattr(model.config, "length_limit", None))
    if constraints is not None:
        if prefix is not None:
            raise ValueError("constraints and a target prefix (decoder_input_ids) cannot be combined")
        vocab = model.config.decoder_vocab_size
        constraints = _constrained_search(constraints, settings, vocab, limits, input_ids.shape[0])
    found = paper_search(models, input_ids, attention_mask, limits, settings, prefix, constraints)
    sequences, scores, attention = found
    if not config.return_dict_in_generate:
        return sequences
    options = {option for option in OUTPUT_OPTIONS if getattr(config, option, False)}
    if len(models) > 1 and options:
        raise ValueError(f"an ensemble returns sequences and sequences_scores only, not {sorted(options)}")
    extra = hypothesis_outputs(model, input_ids, attention_mask, sequences, settings.returned, options)
    output = GenerateBeamEncoderDecoderOutput(sequences=sequences, sequences_scores=scores, **extra)
    if alignment is not None:
        if attention is None:  # not recorded by this model's decoding: one teacher-forced forward
            attention = forced_attention(model, input_ids, attention_mask, sequences, settings.returned, alignment)
        output["alignments"] = attention
    return output


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
    kwargs = {**kwargs, "attention_mask": attention_mask}
    phrases, alignment = _pop_constraints(kwargs), _pop_alignment(kwargs, first.config)
    steps = _pop_steps(kwargs)
    config, given, others = resolve_options(first.generation_config, kwargs)
    if config.do_sample or others:
        raise ValueError(
            f"an ensemble decodes with the paper's search only; it does not take {sorted(others) or ['do_sample']}"
        )
    with contextlib.ExitStack() as stack:
        for model in models:
            stack.enter_context(cpu_decoding_layout(model))
        return _paper_generate(models, config, given, input_ids, kwargs, average, phrases, alignment, steps)


def _transformers_search(model, inputs, generation_config, parent_generate, given, others, kwargs):
    """transformers' `generate`, keeping §6.1's limit (the batch's longest source + 50) where none was given."""
    if others:
        logger.warning_once(
            f"the paper's search does not serve {sorted(others)}: decoding with transformers' search, with §6.1's "
            "length limit (source + 50) and alpha as its length penalty (|Y|^alpha, not GNMT's)"
        )
    kwargs = {key: value for key, value in kwargs.items() if key != "length_normalization"}  # |Y|^alpha there
    if "max_length" not in given and "max_new_tokens" not in given:
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if input_ids is not None:
            config = model.config
            mask = source_mask(input_ids, kwargs.get("attention_mask"), config.pad_token_id, config.eos_token_id)
            kwargs = {**kwargs, "max_new_tokens": paper_length_limit(int(mask.sum(-1).max()))}
    new_tokens = kwargs.get("max_new_tokens")
    if "max_length" not in given and new_tokens and kwargs.get("decoder_input_ids") is None:
        # the same limit as max_length, the decoder's start token counted: transformers warns at every call of
        # max_new_tokens beside a folder's max_length (its default, which a trained folder's config writes out)
        kwargs = {key: value for key, value in kwargs.items() if key != "max_new_tokens"}
        kwargs["max_length"] = new_tokens + 1
    with output_vocabulary(model.config):
        return parent_generate(inputs, generation_config=generation_config, **kwargs)


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
        exact = torch.promote_types(out.logits.dtype, torch.float32)  # a float64 model's stay float64
        extra["scores"] = tuple(F.log_softmax(out.logits[:, t].to(exact), dim=-1) for t in steps)
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


def forced_attention(model, input_ids, attention_mask, sequences, returned: int, alignment: tuple[int, int]):
    """(rows, tokens after the start token, S): layer `alignment[0]`'s cross-attention averaged over its first
    `alignment[1]` heads, for each token of `sequences` (the returned hypotheses), from one teacher-forced forward."""
    layer, heads = alignment
    if sequences.shape[1] < 2:
        return sequences.new_zeros((sequences.shape[0], 0, input_ids.shape[1]), dtype=torch.float32)
    with torch.no_grad():
        out = model(
            input_ids=input_ids.repeat_interleave(returned, 0),
            attention_mask=attention_mask.repeat_interleave(returned, 0),
            decoder_input_ids=sequences[:, :-1],
            output_attentions=True,
            use_cache=False,
            return_dict=True,
        )
    return out.cross_attentions[layer][:, :heads].float().mean(1)
