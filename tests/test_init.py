import math

import pytest
import torch
from torch import nn

from aayn import AaynConfig, AaynForConditionalGeneration


def test_initialization_is_the_papers_not_transformers_generic_one():
    config = AaynConfig(vocab_size=4000, d_model=256, encoder_attention_heads=4, decoder_attention_heads=4)
    model = AaynForConditionalGeneration(config)
    embedding = model.model.shared.weight
    assert abs(embedding[1:].std().item() - 256**-0.5) < 0.003  # N(0, d_model^-0.5), not transformers' 0.02
    assert embedding[config.pad_token_id].abs().max() == 0
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module is not model.lm_head:
            fan_out, fan_in = module.weight.shape
            bound = math.sqrt(6 / (fan_in + fan_out))  # Xavier-uniform
            assert module.weight.abs().max() <= bound, name
            assert module.weight.abs().max() > 0.9 * bound, name
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
