import math

import pytest
import torch
from torch import nn

from aayn import AaynConfig, AaynForConditionalGeneration

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def paper_projections(model) -> dict[str, torch.Tensor]:
    """Every matrix of the paper's §3.2.2 and §3.3 (W^Q, W^K, W^V, W^O per attention, W1 and W2 per feed-forward
    network), cut out of the model's fused projections."""
    matrices = {}
    for name, module in model.named_modules():
        if hasattr(module, "qkv_proj"):
            matrices.update(zip((f"{name}.W_Q", f"{name}.W_K", f"{name}.W_V"), module.qkv_proj.weight.chunk(3)))
        elif hasattr(module, "kv_proj"):
            matrices[f"{name}.W_Q"] = module.q_proj.weight
            matrices.update(zip((f"{name}.W_K", f"{name}.W_V"), module.kv_proj.weight.chunk(2)))
        if hasattr(module, "out_proj"):
            matrices[f"{name}.W_O"] = module.out_proj.weight
        if hasattr(module, "fc1"):
            matrices[f"{name}.W_1"], matrices[f"{name}.W_2"] = module.fc1.weight, module.fc2.weight
    return matrices


def test_initialization_is_the_papers_not_transformers_generic_one():
    """The paper's codebase (tensor2tensor) and the Annotated Transformer draw each projection matrix on its own
    from Xavier-uniform: bound sqrt(6 / (fan_in + fan_out)) of that matrix, computed here from d_model and the
    feed-forward width (sqrt(6 / 2d) for each of W^Q, W^K, W^V, W^O; not from the fused (3d, d) or (2d, d) shapes)."""
    config = AaynConfig(vocab_size=4000, d_model=256, encoder_attention_heads=4, decoder_attention_heads=4)
    model = AaynForConditionalGeneration(config)
    embedding = model.model.shared.weight
    assert abs(embedding[1:].std().item() - 256**-0.5) < 0.003  # N(0, d_model^-0.5), not transformers' 0.02
    assert embedding[config.pad_token_id].abs().max() == 0
    matrices = paper_projections(model)
    assert len(matrices) == 6 * 6 + 6 * 10  # encoder: 4 + 2 per layer; decoder: 8 + 2
    d, ffn = 256, config.encoder_ffn_dim
    for name, weight in matrices.items():
        bound = math.sqrt(6 / (d + ffn)) if name.endswith(("W_1", "W_2")) else math.sqrt(6 / (2 * d))
        assert abs(weight.abs().max() / bound - 1) < 0.01, name  # the same uniform range
        assert abs(weight.std() / (bound / math.sqrt(3)) - 1) < 0.03, name  # uniform(-b, b) has std b / sqrt(3)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module.bias is not None:
            assert module.bias.abs().max() == 0, name
        elif isinstance(module, nn.LayerNorm):
            assert torch.equal(module.weight, torch.ones_like(module.weight)), name
            assert module.bias.abs().max() == 0, name


def test_init_std_draws_projections_and_embeddings_from_one_normal():
    model = AaynForConditionalGeneration(
        AaynConfig(vocab_size=4000, d_model=256, encoder_attention_heads=4, decoder_attention_heads=4, init_std=0.02)
    )
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            weight = module.weight[1:] if isinstance(module, nn.Embedding) else module.weight
            assert abs(weight.std().item() - 0.02) < 0.001, name
            assert abs(weight.mean().item()) < 0.001, name
        if isinstance(module, nn.Linear) and module.bias is not None:
            assert module.bias.abs().max() == 0, name
    assert model.model.shared.weight[model.config.pad_token_id].abs().max() == 0
    for bad in (0, -0.1, True, "0.02"):
        with pytest.raises(ValueError, match="init_std must be None or a positive number"):
            AaynConfig(init_std=bad)
