"""`aayn export --format ctranslate2`: a saved model as a CTranslate2 model, for fast CPU/GPU inference.

CTranslate2 (the inference engine of OpenNMT) ships a Transformer specification for exactly this architecture
(`ctranslate2.specs.TransformerSpec`); its converters cover fairseq, OpenNMT and some transformers classes but not
ours, so this module fills the specification from our weights directly: the fused QKV and KV projections map
one to one, the §3.5 sinusoids are given as a table (CTranslate2's own are laid out sines-then-cosines, ours
interleaved), and the vocabulary is the tokenizer's, token for token. Needs `pip install 'aayn[ct2]'`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers.utils import logging

from ...model.modeling_aayn import AaynForConditionalGeneration
from ...model.policy_aayn import EXTRA_TARGET_TOKENS
from . import CT2_RULES, import_ctranslate2

logger = logging.get_logger(__name__)


def activation_of(config, common_spec):
    """CTranslate2's name for the model's activation (relu: the paper's; swish: OPUS-MT's), or one line."""
    activations = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                   "swish": common_spec.Activation.SWISH, "silu": common_spec.Activation.SWISH}  # fmt: skip
    if config.activation_function not in activations:
        raise ValueError(
            f"CTranslate2 export supports activation_function in {sorted(activations)}, "
            f"got {config.activation_function!r}"
        )
    return activations[config.activation_function]


def ctranslate2_spec(model: AaynForConditionalGeneration, tokens: list[str], target_tokens: list[str] | None = None):
    """The CTranslate2 TransformerSpec holding `model`'s weights, with `tokens` (id order) as its vocabulary (the
    source's, with `target_tokens` the target's where the sides have their own)."""
    ctranslate2 = import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    activation = activation_of(config, common_spec)
    if config.encoder_attention_heads != config.decoder_attention_heads:
        raise ValueError(
            "CTranslate2's Transformer has one head count: encoder_attention_heads and decoder_attention_heads "
            f"must be equal, got {config.encoder_attention_heads} and {config.decoder_attention_heads}"
        )
    target_tokens = tokens if target_tokens is None else target_tokens
    for side, size, known in (("vocab_size", config.vocab_size, tokens),
                              ("decoder_vocab_size", config.decoder_vocab_size, target_tokens)):  # fmt: skip
        if len(known) < size:
            logger.warning(f"the vocabulary has {len(tokens)} tokens for {side}={size}; padding it with made-up tokens")
    spec = transformer_spec.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers),
        config.encoder_attention_heads,
        pre_norm=config.norm_first,
        activation=activation,
        # `return_attention`'s attention: the last decoder layer's, averaged over all heads (fairseq's alignment)
        alignment_layer=-1,
        alignment_heads=config.decoder_attention_heads,
    )
    # copies: CTranslate2 converts and quantizes the arrays it is given in place, which must not reach the model
    weights = {name: tensor.detach().to("cpu", torch.float32, copy=True) for name, tensor in model.state_dict().items()}
    # a table, not a function as ours: long enough for the longest source the tokenizer passes and §6.1's 50 more
    # target tokens (aayn.formats.ctranslate2.engine caps both so; our sinusoids extend past max_position_embeddings
    # the same way)
    rows = config.max_position_embeddings + EXTRA_TARGET_TOKENS + 1
    positions = model.get_encoder().embed.encodings(rows, torch.device("cpu"))

    def linear(target, name: str) -> None:
        target.weight, target.bias = weights[f"{name}.weight"], weights[f"{name}.bias"]

    def norm(target, name: str) -> None:
        target.gamma, target.beta = weights[f"{name}.weight"], weights[f"{name}.bias"]

    def stack(target, name: str) -> None:
        target.scale_embeddings = config.d_model**0.5 if config.scale_embedding else False
        target.position_encodings.encodings = positions
        embeddings = target.embeddings[0] if isinstance(target.embeddings, list) else target.embeddings
        embeddings.weight = weights[f"model.{name}.embed.embed_tokens.weight"]
        if config.norm_first:
            norm(target.layer_norm, f"model.{name}.layer_norm")
        for i, layer in enumerate(target.layer):
            prefix = f"model.{name}.layers.{i}"
            linear(layer.self_attention.linear[0], f"{prefix}.self_attn.qkv_proj")
            linear(layer.self_attention.linear[1], f"{prefix}.self_attn.out_proj")
            norm(layer.self_attention.layer_norm, f"{prefix}.self_attn_norm")
            if name == "decoder":
                linear(layer.attention.linear[0], f"{prefix}.encoder_attn.q_proj")
                linear(layer.attention.linear[1], f"{prefix}.encoder_attn.kv_proj")
                linear(layer.attention.linear[2], f"{prefix}.encoder_attn.out_proj")
                norm(layer.attention.layer_norm, f"{prefix}.encoder_attn_norm")
            linear(layer.ffn.linear_0, f"{prefix}.feed_forward.fc1")
            linear(layer.ffn.linear_1, f"{prefix}.feed_forward.fc2")
            norm(layer.ffn.layer_norm, f"{prefix}.feed_forward_norm")

    stack(spec.encoder, "encoder")
    stack(spec.decoder, "decoder")
    spec.decoder.projection.weight = weights["lm_head.weight"]
    if "lm_head.bias" in weights:  # an output bias (an imported Marian model's final_logits_bias)
        spec.decoder.projection.bias = weights["lm_head.bias"]
    vocabulary = lambda known, size: known[:size] + [f"<madeupword{i}>" for i in range(size - len(known))]
    spec.register_source_vocabulary(vocabulary(tokens, config.vocab_size))
    spec.register_target_vocabulary(vocabulary(target_tokens, config.decoder_vocab_size))
    spec.config.bos_token = target_tokens[config.bos_token_id]
    spec.config.eos_token = target_tokens[config.eos_token_id]
    spec.config.unk_token = "<unk>" if "<unk>" in target_tokens else target_tokens[config.eos_token_id]
    spec.config.decoder_start_token = target_tokens[config.decoder_start_token_id]
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    logger.info(f"CTranslate2 {ctranslate2.__version__} Transformer spec filled")
    return spec


def write_ctranslate2(
    model: AaynForConditionalGeneration,
    tokens: list[str],
    folder: Path,
    quantization: str | None = None,
    target_tokens: list[str] | None = None,
    source_eos: bool = False,
) -> None:
    """The CTranslate2 model (model.bin, vocabularies, its own config.json) into `folder`, a folder being staged.
    `source_eos`: CTranslate2 appends `</s>` to each source itself (for callers whose tokenizer does not, as Argos
    Translate's)."""
    spec = ctranslate2_spec(model, tokens, target_tokens)
    spec.config.add_source_eos = source_eos
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(str(folder))


def vocabularies(tokenizer) -> tuple[list[str], list[str]]:
    """(source, target) tokens in id order: the tokenizer's (shared), or its two where the target side has a
    vocabulary of its own (`target_encoder`: an imported fairseq folder's two dictionaries)."""
    target = getattr(tokenizer, "target_encoder", None)
    if target is not None:
        by_id = lambda vocab: [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
        return by_id(tokenizer.get_vocab()), by_id(target)
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return tokens, tokens


def state_rules(path: Path, config) -> None:
    """The search rules the folder decodes by, into its generation config: the model's length limit, and
    CTranslate2's own beam-search rules (`CT2_RULES`), with one line where they differ from the model's."""
    settings = json.loads(path.read_text(encoding="utf-8"))
    if getattr(config, "length_limit", None) is not None:
        settings["length_limit"] = list(config.length_limit)
    stated = {key: getattr(config, key, None) for key in CT2_RULES}
    if stated != CT2_RULES and (settings.get("num_beams") or 1) > 1:
        logger.warning(
            "CTranslate2 runs a beam search by its own rules (fairseq's: log P / |Y|^alpha, stopping at k finished "
            "hypotheses), not the model's (GNMT's lp, the exact stop): beam outputs may differ; greedy ones do not"
        )
    settings.update(CT2_RULES)
    path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
