"""Recipe arguments: transformers dataclasses parsed by `HfArgumentParser`, names from `run_translation.py`.

A recipe is a YAML file of `key: value` pairs for any of the three dataclasses; flags after it override it
(`aayn train recipes/demo.yaml --max_steps 100`). Both go through argparse, so an unknown key or a value of the
wrong type is an error that names the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from transformers import HfArgumentParser, Seq2SeqTrainingArguments


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
        default=37000, metadata={"help": "size of the shared BPE vocabulary trained for a new model"}
    )
    d_model: int = field(default=512, metadata={"help": "model width (base 512, big 1024)"})
    encoder_layers: int = field(default=6)
    decoder_layers: int = field(default=6)
    attention_heads: int = field(default=8, metadata={"help": "heads of every attention layer"})
    ffn_dim: int = field(default=2048, metadata={"help": "inner size of the feed-forward layers"})
    dropout: float = field(default=0.1, metadata={"help": "residual and embedding dropout, P_drop of §5.4"})
    attention_dropout: float = field(default=0.0)
    activation_dropout: float = field(default=0.0)
    init_std: float | None = field(
        default=None, metadata={"help": "N(0, init_std) initialization; default: the paper codebases' Xavier"}
    )
    norm_first: bool = field(default=False, metadata={"help": "pre-norm instead of the paper's post-norm"})
    max_position_embeddings: int = field(default=1024)
    attn_implementation: str = field(
        default="sdpa",
        metadata={"help": "sdpa, eager, flex_attention or flash_attention_2 (see the model's README section)"},
    )


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
    preprocessing_num_workers: int | None = field(default=None)
    max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "token budget of a padded batch per device (fairseq --max-tokens); "
            "replaces per_device_train_batch_size"
        },
    )
    num_beams: int | None = field(default=None, metadata={"help": "beams for evaluation; default generation_num_beams"})
    length_penalty: float | None = field(default=None, metadata={"help": "length penalty alpha for beam search"})
    average_last_checkpoints: int = field(
        default=0, metadata={"help": "average the last N checkpoints into the final model (§6.1)"}
    )
    num_examples_to_print: int = field(default=5, metadata={"help": "test translations printed at the end"})
    license: str = field(default="apache-2.0", metadata={"help": "license in the model card's metadata"})

    def __post_init__(self):
        from ..data.preprocess import OVERLONG

        if self.overlong not in OVERLONG:
            raise ValueError(f"overlong={self.overlong!r}; allowed: {', '.join(OVERLONG)}")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")
        if self.average_last_checkpoints < 0:
            raise ValueError(f"average_last_checkpoints must be >= 0, got {self.average_last_checkpoints}")


@dataclass
class RunArguments:
    """transformers 5.x dropped `overwrite_output_dir` from the Trainer's arguments (4.57 still has it); aayn train
    keeps run_translation.py's meaning on both lines."""

    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "delete an earlier run in output_dir and start clean (default: refuse)"}
    )


TRAINER_HAS_OVERWRITE = "overwrite_output_dir" in {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)}
ARGUMENT_CLASSES = (ModelArguments, DataTrainingArguments, Seq2SeqTrainingArguments) + (
    () if TRAINER_HAS_OVERWRITE else (RunArguments,)
)


class RecipeError(ValueError):
    """A recipe or flag that aayn train cannot take; the message names it."""


class _Yaml12Loader(yaml.SafeLoader):
    """YAML with the booleans of YAML 1.2 (true/false only): `eval_strategy: no` is the string "no", not False."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _as_flags(recipe: dict) -> list[str]:
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


def _known_keys() -> list[str]:
    return [f.name for cls in ARGUMENT_CLASSES for f in dataclasses.fields(cls) if f.init]


def _check_keys(keys: list[str], where: str, prefix: str = "") -> None:
    """An exact key or an error naming it and the nearest valid one: argparse alone would take `max_step` for
    `max_steps` (an abbreviation)."""
    known = _known_keys()
    for key in keys:
        if key.replace("-", "_") not in known:
            near = difflib.get_close_matches(key.replace("-", "_"), known, n=1, cutoff=0.6)
            hint = f"; did you mean {prefix}{near[0]}?" if near else "; `aayn train --help` lists them"
            raise RecipeError(f"unknown {where} {prefix}{key}{hint}")


def argument_parser() -> HfArgumentParser:
    return HfArgumentParser(
        ARGUMENT_CLASSES, prog="aayn train", description="Train an AAYN translation model.", allow_abbrev=False
    )


def parse_arguments(argv: list[str]) -> tuple[ModelArguments, DataTrainingArguments, Seq2SeqTrainingArguments]:
    """`[RECIPE.yaml] [--key value ...]`: the recipe's values first, the flags after it win."""
    flags = list(argv)
    parser = argument_parser()
    if {"-h", "--help"} & set(flags):
        parser.print_help()
        raise SystemExit(0)
    if flags and not flags[0].startswith("-"):
        recipe = read_recipe(flags[0])
        _check_keys(list(recipe), f"key in recipe {flags[0]}:")
        flags = _as_flags(recipe) + flags[1:]
    _check_keys([flag[2:].split("=")[0] for flag in flags if flag.startswith("--")], "flag", "--")
    parsed = parser.parse_args_into_dataclasses(args=flags)
    model_args, data_args, args = parsed[:3]
    if not TRAINER_HAS_OVERWRITE:
        args.overwrite_output_dir = parsed[3].overwrite_output_dir
    return model_args, data_args, args
