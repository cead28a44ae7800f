"""Recipe arguments: transformers dataclasses parsed by `HfArgumentParser`, names from `run_translation.py`.

A recipe is a YAML file of `key: value` pairs for any of the three dataclasses; flags after it override it
(`aayn train recipes/demo.yaml --max_steps 100`). Both go through transformers' `HfArgumentParser`, so a value of
the wrong type is argparse's error naming the key. Written here, each saying why: the YAML 1.2 booleans, a recipe
under flags, exact keys with the nearest one named, one-line errors, aayn's `auto` values and the stages.

Only `--help` has a path of its own: it reads the Trainer's fields from transformers' source (`recipe_keys`), so it
answers without importing `Seq2SeqTrainingArguments`, whose module imports torch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..model.policy_aayn import (
    BASE_D_MODEL,
    BASE_DROPOUT,
    BASE_FFN_DIM,
    BASE_HEADS,
    BASE_LAYERS,
    BASE_VOCAB_SIZE,
    LICENSE,
    MAX_POSITIONS,
    TOKENIZER_TYPE,
)
from .recipe_keys import SourceField, aayn_fields, imported_trainer_fields, trainer_fields


@dataclass
class ModelArguments:
    """The model to train: a saved aayn model to fine-tune, or the shape of a new one (AaynConfig fields)."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "a saved aayn model (folder or Hub id) to fine-tune"}
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "a saved tokenizer; default: the model's, or a new BPE"}
    )
    vocab_size: int = field(
        default=BASE_VOCAB_SIZE, metadata={"help": "size of the shared vocabulary trained for a new model"}
    )
    tokenizer_type: str = field(
        default=TOKENIZER_TYPE,
        metadata={"help": "a new vocabulary's kind: bpe (byte-level, the tokenizers library) or sentencepiece"},
    )
    sentencepiece_model_type: str = field(
        default="unigram", metadata={"help": "with tokenizer_type sentencepiece: unigram or bpe"}
    )
    d_model: int = field(default=BASE_D_MODEL, metadata={"help": "model width (base 512, big 1024)"})
    encoder_layers: int = field(default=BASE_LAYERS)
    decoder_layers: int = field(default=BASE_LAYERS)
    attention_heads: int = field(default=BASE_HEADS, metadata={"help": "heads of every attention layer"})
    ffn_dim: int = field(default=BASE_FFN_DIM, metadata={"help": "inner size of the feed-forward layers"})
    dropout: float = field(default=BASE_DROPOUT, metadata={"help": "residual and embedding dropout, P_drop of §5.4"})
    attention_dropout: float = field(default=0.0)
    activation_dropout: float = field(default=0.0)
    init_std: float | None = field(
        default=None, metadata={"help": "N(0, init_std) initialization; default: the paper codebases' Xavier"}
    )
    norm_first: bool = field(default=False, metadata={"help": "pre-norm instead of the paper's post-norm"})
    max_position_embeddings: int = field(default=MAX_POSITIONS)
    attn_implementation: str = field(
        default="sdpa",
        metadata={
            "help": "sdpa, eager, flex_attention or flash_attention_2 (see the model's README section); "
            "auto: eager where training runs on a CPU, sdpa on a GPU"
        },
    )
    bf16_weights: bool = field(
        default=False,
        metadata={
            "help": "with bf16: the model's weights in bfloat16 and Adam on float32 master weights (fairseq's --bf16) "
            "instead of bf16 autocast; every saved folder holds the float32 master weights"
        },
    )
    # the keys the recipe or a flag set (not a key itself): fine-tuning applies only those (`parse_arguments`)
    given: frozenset = field(default=frozenset(), init=False, repr=False)

    def __post_init__(self):
        from ..data.tokenizer import SENTENCEPIECE_TYPES, TOKENIZER_TYPES

        for name, allowed in (("tokenizer_type", TOKENIZER_TYPES), ("sentencepiece_model_type", SENTENCEPIECE_TYPES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r}; allowed: {', '.join(allowed)}")


@dataclass
class DataTrainingArguments:
    """What to train on and how to batch it."""

    dataset_name: str = field(
        metadata={"help": 'Hub id, local folder, or "bible" (see aayn.data.load_translation_dataset)'}
    )
    source_lang: str = field(metadata={"help": "source language code, e.g. en"})
    target_lang: str = field(metadata={"help": "target language code, e.g. fr"})
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "Hub config such as de-en; default: found from the languages"}
    )
    lang_pairs: str | None = field(
        default=None,
        metadata={
            "help": "several pairs in one model, SRC-TGT separated by commas (en-es,en-fr): the target's >>xx<< "
            "token before each source, one vocabulary; source_lang / target_lang then default to the first pair"
        },
    )
    sampling_temperature: float = field(
        default=1.5,
        metadata={"help": "with lang_pairs: pair i's share of the training examples, as size_i^(1/T)"},
    )
    source_lang_token: bool = field(
        default=False,
        metadata={
            "help": "with lang_pairs: the source language's __xx__ token after the target's >>xx<< before each "
            "source (fairseq's --encoder-langtok src); every door then needs the source language"
        },
    )
    bpe_dropout: float = field(
        default=0.0,
        metadata={
            "help": "BPE-dropout (Provilkov et al. 2020): each merge left out with this chance, a new segmentation "
            "of every training sentence each epoch (0.1 in the paper; byte-level BPE; 0: off)"
        },
    )
    sentencepiece_alpha: float = field(
        default=0.0,
        metadata={
            "help": "SentencePiece sampling (Kudo 2018): a new segmentation of every training sentence each epoch, "
            "drawn with probability P(x)^alpha (0.1-0.2 in the paper; a unigram model; 0: off)"
        },
    )
    sentencepiece_nbest: int = field(
        default=-1,
        metadata={"help": "with sentencepiece_alpha: draw among every segmentation (-1) or the n best (n > 1)"},
    )
    train_split: str = field(
        default="train", metadata={"help": "split expression for training, slicing allowed: train[:10%%]"}
    )
    validation_split: str = field(default="validation")
    test_split: str = field(default="test")
    max_source_length: int = field(default=256)
    max_target_length: int = field(default=256)
    overlong: str = field(default="drop", metadata={"help": "over-long pairs in training: truncate or drop"})
    max_train_samples: int | None = field(default=None)
    max_eval_samples: int | None = field(default=None)
    max_predict_samples: int | None = field(default=None)
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "processes that tokenize the corpus (default: the cores available)"}
    )
    input_sentence_size: int = field(
        default=2_000_000,
        metadata={
            "help": "sentences a new BPE is trained on: both sides of a seeded random sample of half as many pairs "
            "(sentencepiece's name; 0: every sentence)"
        },
    )
    max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "token budget of a padded batch per device (fairseq --max-tokens); "
            "replaces per_device_train_batch_size"
        },
    )
    batch_tokens: int | None = field(
        default=None,
        metadata={
            "help": "tokens an optimizer step takes over every process and accumulation step (the paper: ~25000); "
            "what gradient_accumulation_steps: auto makes from max_tokens batches"
        },
    )
    length_buckets: list[int] | None = field(
        default=None,
        metadata={
            "help": "with max_tokens: ascending lengths (multiples of 8, the last the longest allowed); each batch "
            "takes sentences of one bucket and is padded to it, so a step has few shapes (for torch_compile)"
        },
    )
    num_beams: int | None = field(default=None, metadata={"help": "beams for evaluation; default generation_num_beams"})
    length_penalty: float | None = field(default=None, metadata={"help": "length penalty alpha for beam search"})
    average_last_checkpoints: int = field(
        default=0, metadata={"help": "average the last N checkpoints into the final model (§6.1)"}
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "stop when metric_for_best_model (e.g. bleu) has not improved for N evaluations "
            "(transformers' EarlyStoppingCallback)"
        },
    )
    early_stopping_threshold: float = field(
        default=0.0, metadata={"help": "with early_stopping_patience: the least change that counts as improving"}
    )
    num_examples_to_print: int = field(default=5, metadata={"help": "test translations printed at the end"})
    license: str = field(default=LICENSE, metadata={"help": "license in the model card's metadata"})

    def __post_init__(self):
        from ..data.preprocess import OVERLONG

        if self.overlong not in OVERLONG:
            raise ValueError(f"overlong={self.overlong!r}; allowed: {', '.join(OVERLONG)}")
        for name in ("max_source_length", "max_target_length"):
            if getattr(self, name) < 2:
                raise ValueError(f"{name} must be >= 2 (one token plus </s>), got {getattr(self, name)}")
        longest = max(self.max_source_length, self.max_target_length)
        if self.max_tokens is not None and self.max_tokens < longest:
            raise ValueError(
                f"max_tokens={self.max_tokens} cannot batch a sentence of {longest} tokens, the longest that "
                "max_source_length / max_target_length allow; raise max_tokens or lower those lengths"
            )
        if self.batch_tokens is not None and (self.batch_tokens < 1 or self.max_tokens is None):
            raise ValueError(f"batch_tokens={self.batch_tokens} counts max_tokens batches: give max_tokens, and a "
                             "batch_tokens of at least 1")  # fmt: skip
        if self.length_buckets is not None:
            from ..data.batching import check_buckets

            if self.max_tokens is None:
                raise ValueError("length_buckets cut max_tokens batches: give max_tokens too")
            check_buckets(self.length_buckets, longest, self.max_tokens)
        if self.input_sentence_size < 0:
            raise ValueError(f"input_sentence_size must be >= 0 (0: every sentence), got {self.input_sentence_size}")
        if self.preprocessing_num_workers is not None and self.preprocessing_num_workers < 1:
            raise ValueError(f"preprocessing_num_workers must be >= 1, got {self.preprocessing_num_workers}")
        if self.average_last_checkpoints < 0:
            raise ValueError(f"average_last_checkpoints must be >= 0, got {self.average_last_checkpoints}")
        if self.early_stopping_patience is not None and self.early_stopping_patience < 1:
            raise ValueError(f"early_stopping_patience must be a positive integer, got {self.early_stopping_patience}")
        if self.early_stopping_threshold < 0:
            raise ValueError(f"early_stopping_threshold must be >= 0, got {self.early_stopping_threshold}")


@dataclass
class RunArguments:
    """transformers 5.x dropped `overwrite_output_dir` from the Trainer's arguments (4.57 still has it); aayn train
    keeps run_translation.py's meaning on both lines."""

    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "delete an earlier run in output_dir and start clean (default: refuse)"}
    )


AAYN_ARGUMENT_CLASSES = (ModelArguments, DataTrainingArguments, RunArguments)


def _argument_classes() -> tuple[type, ...]:
    from transformers import Seq2SeqTrainingArguments

    trainer_has_overwrite = "overwrite_output_dir" in {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)}
    return (ModelArguments, DataTrainingArguments, Seq2SeqTrainingArguments) + (
        () if trainer_has_overwrite else (RunArguments,)
    )


class RecipeError(ValueError):
    """A recipe or flag that aayn train cannot take; the message names it."""


class _Yaml12Loader(yaml.SafeLoader):
    """YAML with the booleans of YAML 1.2 (true/false only): `eval_strategy: no` is the string "no", not False.
    Written here: `HfArgumentParser.parse_yaml_file` reads YAML 1.1 (`yaml.safe_load`), where `no` is False."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _as_flags(recipe: dict) -> list[str]:
    """The recipe as the flags that say it. Written here: `HfArgumentParser` parses a file or a command line, not a
    file with flags after it that override its values."""
    flags = []
    for key, value in recipe.items():
        if value is None:
            continue
        flags.append(f"--{key}")
        if isinstance(value, bool):
            flags.append(str(value).lower())
        elif isinstance(value, list):
            flags.extend(str(item) for item in value)
        elif isinstance(value, dict):
            flags.append(json.dumps(value))
        else:
            flags.append(str(value))
    return flags


def read_recipe(path: str) -> dict:
    recipe_path = Path(path)
    if not recipe_path.is_file():
        raise FileNotFoundError(f"recipe {path!r} does not exist")
    try:
        recipe = yaml.load(recipe_path.read_text(encoding="utf-8"), Loader=_Yaml12Loader) or {}
    except yaml.YAMLError as error:
        raise RecipeError(f"recipe {path} is not valid YAML: {error}") from error
    if not isinstance(recipe, dict):
        raise RecipeError(f"recipe {path} must be a mapping of key: value, got {type(recipe).__name__}")
    return recipe


def _bool(text: str, key: str) -> bool:
    """The bool HfArgumentParser would make of `text` (transformers' `string_to_bool`), for the keys aayn reads
    before parsing (the stages, `use_cpu` and `bf16` for the autos); a RecipeError naming `key` otherwise."""
    from transformers.hf_argparser import string_to_bool  # no torch

    try:
        return string_to_bool(text)
    except argparse.ArgumentTypeError as error:
        raise RecipeError(f"--{key}: {error}") from None


def _nearest(word: str, known, prefix: str = "") -> str:
    near = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {prefix}{near[0]}?" if near else ""


def _check_keys(keys: list[str], known: set[str], where: str, prefix: str = "") -> None:
    """An exact key or an error naming it and the nearest valid one. Written by hand: HfArgumentParser, as
    argparse, says only "unrecognized arguments" (or, with abbreviations allowed, takes `max_step` for
    `max_steps`)."""
    for key in keys:
        if key.replace("-", "_") not in known:
            hint = _nearest(key.replace("-", "_"), known, prefix) or "; `aayn train --help` lists them"
            raise RecipeError(f"unknown {where} {prefix}{key}{hint}")


def bf16_matmuls(use_cpu: bool) -> tuple[bool, str]:
    """(whether bfloat16 matmuls run natively where training runs, the unit named): a GPU that supports bf16, or a
    CPU with AVX512-BF16 or AMX. Elsewhere torch emulates them, and bf16 autocast makes a CPU step several times
    slower than float32 (the demo's step: 4 s instead of 0.3 s on a 2-core AVX2 EPYC, 2026-11-25)."""
    import torch

    if not use_cpu and torch.cuda.is_available():
        return torch.cuda.is_bf16_supported(), "this GPU"
    native = any(
        getattr(torch.cpu, name, lambda: False)() for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    )
    return native, f"this CPU ({torch.backends.cpu.get_cpu_capability()})"


def _flag_value(flags: list[str], key: str) -> str | None:
    """The value the last `--key value`, `--key=value` or bare `--key` (a bool's "true") among `flags` gives."""
    value = None
    for index, flag in enumerate(flags):
        name, inline, text = flag[2:].partition("=")
        if not flag.startswith("--") or name.replace("-", "_") != key:
            continue
        if inline:
            value = text
        elif index + 1 < len(flags) and not flags[index + 1].startswith("--"):
            value = flags[index + 1]
        else:
            value = "true"
    return value


def _flag_bool(flags: list[str], key: str) -> bool:
    return _bool(_flag_value(flags, key) or "false", key)


# the stages of a run, as run_translation.py names them; aayn train runs all three unless told otherwise
STAGES = ("do_train", "do_eval", "do_predict")


def tf32_matmuls(use_cpu: bool) -> tuple[bool, str]:
    """(whether float32 matmuls can run as TF32 where training runs, the unit named): a CUDA GPU of compute
    capability 8.0 or more (Ampere and later). The Trainer's `tf32: true` raises elsewhere."""
    import torch

    if use_cpu or not torch.cuda.is_available():
        return False, "no GPU"
    major, minor = torch.cuda.get_device_capability()
    return major >= 8, f"this GPU (compute capability {major}.{minor})"


def _auto_bf16(flags: list[str]) -> str:
    native, unit = bf16_matmuls(_flag_bool(flags, "use_cpu"))
    choice, has = ("bf16 autocast", "has") if native else ("float32", "has no")
    print(f"bf16: auto -> {choice}: {unit} {has} native bf16 matmuls")
    return "true" if native else "false"


def _auto_tf32(flags: list[str]) -> str | None:
    """ "true" on a GPU with TF32; else the key left unset (the Trainer's default, which touches nothing), said in
    one line where training runs on a GPU."""
    able, unit = tf32_matmuls(_flag_bool(flags, "use_cpu"))
    if unit != "no GPU":
        print(f"tf32: auto -> {'on' if able else 'unset'}: {unit} {'has' if able else 'has no'} TF32 matmuls")
    return "true" if able else None


# processes that fetch and collate training batches beside the steps where training runs on a GPU
GPU_DATALOADER_WORKERS = 2


def _auto_workers(flags: list[str]) -> str | None:
    """`GPU_DATALOADER_WORKERS` where training runs on a GPU: fetching and collating a batch is host work (~15 ms for
    25k tokens on a 2-core EPYC, as long as a base step's products on an H200), which worker processes do beside the
    steps; unset (0, in the training process) on a CPU, where workers would take the step's cores. Said in one line
    on a GPU."""
    import torch

    if _flag_bool(flags, "use_cpu") or not torch.cuda.is_available():
        return None
    print(f"dataloader_num_workers: auto -> {GPU_DATALOADER_WORKERS}: batches collated beside the GPU's steps")
    return str(GPU_DATALOADER_WORKERS)


def _auto_attention(flags: list[str]) -> str:
    """eager where training runs on a CPU (there, in bf16, torch's SDPA backward is slower than plain matmuls and a
    softmax: the demo recipe's measurement), sdpa on a GPU (its fused kernels). Said in one line."""
    import torch

    on_cpu = _flag_bool(flags, "use_cpu") or not torch.cuda.is_available()
    choice = "eager" if on_cpu else "sdpa"
    print(f"attn_implementation: auto -> {choice}: training runs on {'the CPU' if on_cpu else 'a GPU'}")
    return choice


def _auto_accumulation(flags: list[str]) -> str:
    """The micro-batches a step accumulates so that it takes `batch_tokens` (the paper's ~25000) in `max_tokens`
    batches over the processes that `accelerate launch` or `torchrun` started (their WORLD_SIZE): 8 on one device
    at 3,125 tokens, 1 on eight, 1 on one device whose memory takes `max_tokens: 25000`. Said in one line."""
    batch, micro = _flag_value(flags, "batch_tokens"), _flag_value(flags, "max_tokens")
    if batch is None or micro is None or int(micro) < 1:
        raise RecipeError("gradient_accumulation_steps: auto makes batch_tokens from max_tokens batches: give both")
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    steps = max(1, round(int(batch) / (int(micro) * processes)))
    print(f"gradient_accumulation_steps: auto -> {steps}: {micro} tokens x {steps} x {processes} process"
          f"{'es' if processes > 1 else ''} for batch_tokens {batch}")  # fmt: skip
    return str(steps)


# aayn's `auto` for keys of the Trainer and the model: how the machine decides each (a value, or None: unset)
AUTO_KEYS = {"bf16": _auto_bf16, "tf32": _auto_tf32, "dataloader_num_workers": _auto_workers,
             "gradient_accumulation_steps": _auto_accumulation, "attn_implementation": _auto_attention}  # fmt: skip


def _resolve_autos(flags: list[str]) -> list[str]:
    """`bf16: auto` (bf16 autocast where its matmuls run natively, float32 elsewhere), `tf32: auto` (TF32 for
    float32 matmuls on GPUs that have it), `dataloader_num_workers: auto` (worker processes on a GPU),
    `gradient_accumulation_steps: auto` (`batch_tokens` over the processes) and `attn_implementation: auto` (eager on
    a CPU, sdpa on a GPU), each said in one line. The last flag of a key decides, as for any key: a recipe's `auto`
    followed by `--bf16 true` trains in bf16 without asking the machine."""
    for key, decide in AUTO_KEYS.items():
        autos = [i for i, flag in enumerate(flags) if flag == f"--{key}=auto"
                 or (flag == f"--{key}" and i + 1 < len(flags) and flags[i + 1] == "auto")]  # fmt: skip
        if not autos:
            continue
        value = _flag_value(flags, key)
        if value == "auto":
            value = decide(flags)
        resolved = []
        for index, flag in enumerate(flags):
            if index in autos:
                resolved += [f"--{key}", value] if value is not None else []
            elif not (index - 1 in autos and flags[index - 1] == f"--{key}"):  # an `auto` already replaced
                resolved.append(flag)
        flags = resolved
    return flags


def _bf16_weights(flags: list[str]) -> list[str]:
    """`bf16_weights: true` says how bf16 training runs: the Trainer's `bf16` (autocast) is then turned off before
    its arguments are built, and aayn casts the weights (`training.master_weights`); with bf16 false (given, or
    `auto` on a machine without native bf16 matmuls) it is not used. Said in one line either way."""
    if not _flag_bool(flags, "bf16_weights"):
        return flags
    if not _flag_bool(flags, "bf16"):
        print("bf16_weights is not used: bf16 is false, training runs in float32")
        return [*flags, "--bf16_weights", "false"]
    print("bf16_weights: the weights in bfloat16, Adam on float32 master weights, no autocast")
    return [*flags, "--bf16", "false"]


PROG, DESCRIPTION = "aayn train", "Train an AAYN translation model."
USAGE = f"{PROG} [RECIPE.yaml] [--key value ...]"


def help_parser() -> argparse.ArgumentParser:
    """The parser `aayn train --help` prints: every key with its type, default and help, built from aayn's
    dataclasses and transformers' source, so help needs neither torch nor transformers."""
    parser = argparse.ArgumentParser(prog=PROG, usage=USAGE, description=DESCRIPTION, allow_abbrev=False)
    for cls, title in zip(AAYN_ARGUMENT_CLASSES, ("model", "data", "run")):
        group = parser.add_argument_group(f"{title} ({cls.__name__})", cls.__doc__.replace("%", "%%"))
        for source_field in aayn_fields(cls):
            _add_help(group, source_field)
    group = parser.add_argument_group("training (transformers' Seq2SeqTrainingArguments)")
    for source_field in trainer_fields() or imported_trainer_fields():
        if source_field.name != "overwrite_output_dir":  # listed once, under run
            _add_help(group, source_field)
    return parser


def _add_help(group, source_field: SourceField) -> None:
    default = "required" if source_field.default is None else f"default: {source_field.default.replace('%', '%%')}"
    group.add_argument(
        f"--{source_field.name}",
        metavar=source_field.annotation.replace("%", "%%"),
        help=f"{source_field.help} ({default})".lstrip(),
    )


_CHOICE = re.compile(r"invalid choice: '(.*?)' \(choose from (.*)\)$")


def _one_line_error(message: str):
    """argparse's error in one line (it would print the whole usage, every Trainer option, first), with what it lacks
    written here: the key as a recipe names it (not `argument --max_steps/--max-steps`), the nearest choice instead
    of all of them (the optimizers are 40)."""
    message = re.sub(r"(--\w+)(/--[\w-]+)+", r"\1", message).removeprefix("argument ")
    if choice := _CHOICE.search(message):
        choices = [word.strip("'") for word in choice.group(2).split(", ")]
        hint = _nearest(choice.group(1), choices) or f" (choose from {', '.join(choices)})"
        message = f"{message[: choice.start()]}invalid choice: {choice.group(1)!r}{hint}"
    raise RecipeError(f"{message}; usage: {USAGE} (aayn train --help lists every key)")


def argument_parser():
    """transformers' own parser of the dataclasses (types, booleans, optionals, enums), errors in one line."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(_argument_classes(), prog=PROG, description=DESCRIPTION, allow_abbrev=False)
    parser.error = _one_line_error
    return parser


MIXED_PRECISION = "ACCELERATE_MIXED_PRECISION"


@contextlib.contextmanager
def environment_unchanged(name: str = MIXED_PRECISION):
    """A block after which `name` is in the environment as before it. transformers 4.57's arguments with bf16 or
    fp16 write ACCELERATE_MIXED_PRECISION, which a later float32 run of the same process (its arguments read it
    back) and every process started later (`accelerate launch`, a subprocess) would inherit: bf16 autocast
    unasked. (5.x reads it without writing it.)"""
    before = os.environ.get(name)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def parse_arguments(argv: list[str]) -> tuple:
    """`[RECIPE.yaml] [--key value ...]`: the recipe's values first, the flags after it win, all parsed by
    transformers' `HfArgumentParser`; returns (ModelArguments, DataTrainingArguments, Seq2SeqTrainingArguments)."""
    flags = list(argv)
    if {"-h", "--help"} & set(flags):
        # the one path of its own: the help read from transformers' source needs no torch, where the parser
        # imports Seq2SeqTrainingArguments and torch with it (both timed in docs/measurements.md)
        help_parser().print_help()
        raise SystemExit(0)
    recipe = read_recipe(flags.pop(0)) if flags and not flags[0].startswith("-") else {}
    parser = argument_parser()
    known = {option[2:] for action in parser._actions for option in action.option_strings if option[:2] == "--"}
    if recipe:
        _check_keys(list(recipe), known, f"key in recipe {argv[0]}:")
    flags = _as_flags(recipe) + flags
    _check_keys([flag[2:].split("=")[0] for flag in flags if flag.startswith("--")], known, "flag", "--")
    given = {flag[2:].split("=")[0].replace("-", "_") for flag in flags if flag.startswith("--")}
    if (pairs := _flag_value(flags, "lang_pairs")) is not None:  # the first pair's languages, unless given
        from ..languages import parse_lang_pairs

        try:
            first = parse_lang_pairs(pairs)[0]
        except ValueError as error:
            raise RecipeError(str(error)) from None
        for name, lang in zip(("source_lang", "target_lang"), first):
            if name not in given:
                flags, given = [*flags, f"--{name}", lang], given | {name}
    stages = {stage: _bool(value, stage) for stage in STAGES if (value := _flag_value(flags, stage)) is not None}
    if stages.get("do_eval") is False:  # no evaluation during training either (the Trainer would set do_eval again)
        flags = [*flags, "--eval_strategy", "no"]
    if _flag_value(flags, "batch_tokens") is not None and _flag_value(flags, "gradient_accumulation_steps") != "auto":
        print("batch_tokens is not used: gradient_accumulation_steps is not auto")
    flags = _bf16_weights(_resolve_autos(flags))
    with environment_unchanged():  # 4.57's arguments write the precision into it (`environment_unchanged`)
        parsed = parser.parse_args_into_dataclasses(args=flags)
    model_args, data_args, args = parsed[:3]
    model_args.given = frozenset(given)
    args.do_train, args.do_predict = stages.get("do_train", True), stages.get("do_predict", True)
    if not (args.do_train or args.do_predict):
        raise RecipeError("do_train and do_predict are both false: nothing to do")
    if not args.do_train and not model_args.model_name_or_path:
        raise RecipeError("do_train false needs --model_name_or_path: the model to test")
    if len(parsed) > 3:  # transformers 5.x: RunArguments carries overwrite_output_dir
        args.overwrite_output_dir = parsed[3].overwrite_output_dir
    if args.max_steps == 0 or args.max_steps < -1:  # the Trainer would train by epochs instead
        raise RecipeError(f"max_steps must be positive, or -1 to train for num_train_epochs; got {args.max_steps}")
    return model_args, data_args, args
