import math

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
