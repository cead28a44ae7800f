"""The `aayn train` run's model: a new one of the plan's shape, or a saved aayn model to fine-tune (dropout may
change, the shape may not), with the plan's loss and generation settings."""

from __future__ import annotations

from transformers import AutoConfig, AutoModelForSeq2SeqLM
from transformers.utils import logging

from ..checks import check_model_folder
from ..model.configuration_aayn import AaynConfig
from ..model.modeling_aayn import AaynForConditionalGeneration
from ..model.policy_aayn import UNSET_LENGTH_PENALTY
from .arguments import ModelArguments
from .plan import RunPlan

logger = logging.get_logger("aayn.training")


# keys of a new model's shape, as the model's config names them: a trained model has its own
SHAPE_KEYS = {
    "d_model": ("d_model",),
    "encoder_layers": ("encoder_layers",),
    "decoder_layers": ("decoder_layers",),
    "attention_heads": ("encoder_attention_heads", "decoder_attention_heads"),
    "ffn_dim": ("encoder_ffn_dim", "decoder_ffn_dim"),
    "norm_first": ("norm_first",),
    "max_position_embeddings": ("max_position_embeddings",),
    "init_std": ("init_std",),
}
# keys that may change on a trained model: they apply, and land in the saved config
FINE_TUNING_KEYS = ("dropout", "attention_dropout", "activation_dropout")


def fine_tuning_overrides(model_args: ModelArguments, config) -> dict:
    """The config values the recipe or flags change on the model to fine-tune; a shape key that differs from the
    model's own value is refused in one line (a recipe may repeat the model's shape)."""
    given = model_args.given
    if "vocab_size" in given and model_args.vocab_size != getattr(config, "vocab_size", None):
        logger.warning(
            f"vocab_size {model_args.vocab_size} sizes a new model's BPE; the model in {model_args.model_name_or_path} "
            f"keeps its {config.vocab_size}-token vocabulary"
        )
    for key in ("tokenizer_type", "sentencepiece_model_type"):
        if key in given:
            logger.warning(f"{key} chooses a new model's vocabulary; the model keeps its own tokenizer")
    for key, names in SHAPE_KEYS.items():
        value = getattr(model_args, key)
        if key not in given:
            continue
        held = [getattr(config, name, None) for name in names]
        if any(other != value for other in held):
            raise ValueError(
                f"--{key} {value}: the model in {model_args.model_name_or_path} has {key} {held[0]}, and a trained "
                f"model's shape cannot change; drop --{key} to fine-tune it, or train a new model"
            )
    return {key: getattr(model_args, key) for key in FINE_TUNING_KEYS if key in given and hasattr(config, key)}


def load_pretrained(model_args: ModelArguments):
    """The model to fine-tune, read before output_dir is touched; a damaged folder is named file by file. Dropout
    given in the recipe or flags replaces the model's; a shape that differs from the model's is refused."""
    location = model_args.model_name_or_path
    check_model_folder(location, "--model_name_or_path", tokenizer=not model_args.tokenizer_name)
    if model_args.tokenizer_name:
        check_model_folder(model_args.tokenizer_name, "--tokenizer_name", config=False, weights=False)
    try:
        config = AutoConfig.from_pretrained(location)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot load a model from --model_name_or_path {location}: {error}") from None
    if config.model_type != "aayn":  # the run's loss, search and card are aayn's: another model would miss them
        raise ValueError(
            f"--model_name_or_path {location} is a {config.model_type} model; aayn train fine-tunes aayn models"
        )
    overrides = fine_tuning_overrides(model_args, config)
    try:
        return AutoModelForSeq2SeqLM.from_pretrained(
            location, attn_implementation=model_args.attn_implementation, **overrides
        )
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot load a model from --model_name_or_path {location}: {error}") from None


def build_model(plan: RunPlan, tokenizer) -> AaynForConditionalGeneration:
    """The run's model: the one to fine-tune, or a new one of the plan's config with the tokenizer's size and ids."""
    if plan.model_args.model_name_or_path:
        return load_pretrained(plan.model_args)
    special = dict(
        vocab_size=len(tokenizer),
        decoder_vocab_size=None,  # one shared vocabulary: the tokenizer's
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    config = AaynConfig.from_dict({**plan.config.to_dict(), **special})
    config._attn_implementation = plan.model_args.attn_implementation
    return AaynForConditionalGeneration(config)


def configure_model(model, plan: RunPlan) -> None:
    """The plan's loss and generation settings on the model (they are saved with it)."""
    if model.config.model_type == "aayn":
        model.config.label_smoothing = plan.label_smoothing
    config = model.generation_config
    for key, value in plan.generation.items():
        setattr(config, key, value)
    if config.num_beams == 1:  # greedy: GenerationConfig refuses to save a beam-only setting
        config.length_penalty = UNSET_LENGTH_PENALTY


def model_summary(model) -> str:
    """One line: the model's type, parameter count and shape, as a run starts."""
    config = model.config
    parameters = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    shape = ", ".join(
        f"{name} {getattr(config, key)}"
        for name, key in (("d_model", "d_model"), ("heads", "encoder_attention_heads"), ("ffn", "encoder_ffn_dim"),
                          ("vocabulary", "vocab_size"), ("dropout", "dropout"))
        if getattr(config, key, None) is not None
    )  # fmt: skip
    layers = f"{getattr(config, 'encoder_layers', '?')}+{getattr(config, 'decoder_layers', '?')} layers"
    share = "" if trainable == parameters else f" ({trainable:,} trainable)"
    return f"{config.model_type}, {parameters:,} parameters{share}: {layers}, {shape}"
