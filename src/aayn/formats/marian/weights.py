"""transformers' MarianMTModel as the same network as AAYN: the comparison baseline of `aayn bench`.

MarianMTModel is the closest model transformers ships: post-norm, sinusoidal positions, scaled embeddings, tied
weights. Configured to the same shapes, it computes the same function as `AaynForConditionalGeneration` once its
weights are mapped over. The one difference, the layout of the sinusoids (Marian puts all sines before all
cosines; §3.5 and we interleave them), is a fixed permutation of the d_model residual dimensions, and every
Transformer is exactly equivariant under such a permutation: permute every weight that reads or writes the
residual stream and the outputs are unchanged.
"""

import torch
from transformers import MarianConfig, MarianMTModel

from ...model.configuration_aayn import AaynConfig


def marian_config_for(config: AaynConfig) -> MarianConfig:
    """A MarianConfig with the shapes and special tokens of `config` (shared vocabulary, tied, post-norm)."""
    if config.norm_first or not (config.share_encoder_decoder_embeddings and config.tie_word_embeddings):
        raise ValueError("MarianMTModel is post-norm with one tied vocabulary: norm_first must be False and "
                         "share_encoder_decoder_embeddings and tie_word_embeddings True")  # fmt: skip
    return MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        activation_function=config.activation_function,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=config.scale_embedding,
        init_std=0.02 if config.init_std is None else config.init_std,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=None,
    )


def residual_permutation(d_model: int) -> torch.Tensor:
    """perm[k] is the Marian dimension that holds what AAYN keeps in dimension k: sin of frequency i at 2i
    (Marian: i), cos at 2i + 1 (Marian: d_model / 2 + i)."""
    half = torch.arange(d_model // 2)
    return torch.stack((half, half + d_model // 2), dim=1).flatten()


def aayn_state_dict_from_marian(marian: MarianMTModel) -> dict[str, torch.Tensor]:
    """Marian's weights, renamed, fused (QKV) and permuted into an `AaynForConditionalGeneration` state dict."""
    weights = marian.state_dict()
    if weights["final_logits_bias"].abs().max() > 0:
        raise ValueError("MarianMTModel.final_logits_bias is not zero; AAYN has no output bias (§3.4)")
    return mapped(weights, marian.config)


def marian_state_dict_from_aayn(model, marian: MarianMTModel) -> dict[str, torch.Tensor]:
    """The inverse: our weights as a (partial) state dict of `marian` (same shapes), for `load_state_dict(...,
    strict=False)`. The mapping only moves elements, so mapping the elements' numbers tells where each goes."""
    weights = marian.state_dict()
    numbers, start = {}, 0
    for name, weight in weights.items():
        numbers[name] = torch.arange(start, start + weight.numel()).view(weight.shape)
        start += weight.numel()
    flat = torch.cat([weight.detach().reshape(-1).float() for weight in weights.values()])
    touched = torch.zeros(start, dtype=torch.bool)
    ours = model.state_dict()
    for name, where in mapped(numbers, marian.config).items():
        flat[where.reshape(-1)] = ours[name].detach().reshape(-1).float()
        touched[where.reshape(-1)] = True
    return {  # tied copies (encoder/decoder embeddings, lm_head) share model.shared's storage and are left out
        name: flat[numbers[name].reshape(-1)].view(weight.shape).to(weight.dtype)
        for name, weight in weights.items()
        if touched[numbers[name].reshape(-1)].all()
    }


def mapped(weights: dict[str, torch.Tensor], config, permuted: bool = True) -> dict[str, torch.Tensor]:
    """Marian's layers' weights under aayn's names, fused (QKV, KV); `permuted`: into the residual order of the
    paper's interleaved sinusoids (else Marian's own, for `position_encoding="marian"`)."""
    perm = residual_permutation(config.d_model) if permuted else slice(None)
    reads = lambda w: w[:, perm]
    writes = lambda w: w[perm]

    def attention(marian_prefix: str, ours: str, cross: bool) -> dict[str, torch.Tensor]:
        get = lambda name: weights[f"{marian_prefix}.{name}"]
        kv = ("k_proj", "v_proj")
        fused = ("kv_proj", kv) if cross else ("qkv_proj", ("q_proj", *kv))
        out = {
            f"{ours}.{fused[0]}.weight": reads(torch.cat([get(f"{p}.weight") for p in fused[1]])),
            f"{ours}.{fused[0]}.bias": torch.cat([get(f"{p}.bias") for p in fused[1]]),
            f"{ours}.out_proj.weight": writes(get("out_proj.weight")),
            f"{ours}.out_proj.bias": writes(get("out_proj.bias")),
        }
        if cross:
            out[f"{ours}.q_proj.weight"] = reads(get("q_proj.weight"))
            out[f"{ours}.q_proj.bias"] = get("q_proj.bias")
        return out

    def sublayer(marian_name: str, ours: str, layer: str) -> dict[str, torch.Tensor]:
        return {f"{ours}.{p}": writes(weights[f"{layer}.{marian_name}.{p}"]) for p in ("weight", "bias")}

    def feed_forward(marian_layer: str, ours: str) -> dict[str, torch.Tensor]:
        return {
            f"{ours}.fc1.weight": reads(weights[f"{marian_layer}.fc1.weight"]),
            f"{ours}.fc1.bias": weights[f"{marian_layer}.fc1.bias"],
            f"{ours}.fc2.weight": writes(weights[f"{marian_layer}.fc2.weight"]),
            f"{ours}.fc2.bias": writes(weights[f"{marian_layer}.fc2.bias"]),
        }

    ours = {"model.shared.weight": reads(weights["model.shared.weight"])} if "model.shared.weight" in weights else {}
    for stack, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n):
            layer, mine = f"model.{stack}.layers.{i}", f"model.{stack}.layers.{i}"
            ours |= attention(f"{layer}.self_attn", f"{mine}.self_attn", cross=False)
            ours |= sublayer("self_attn_layer_norm", f"{mine}.self_attn_norm", layer)
            if stack == "decoder":
                ours |= attention(f"{layer}.encoder_attn", f"{mine}.encoder_attn", cross=True)
                ours |= sublayer("encoder_attn_layer_norm", f"{mine}.encoder_attn_norm", layer)
            ours |= feed_forward(layer, f"{mine}.feed_forward")
            ours |= sublayer("final_layer_norm", f"{mine}.feed_forward_norm", layer)
    return ours
