"""§5.4's dropout as the model applies it on CPU (`AaynDropout`: 16 random bits per element, four elements per
64-bit draw) behaves as `torch.nn.Dropout` does: each element is zeroed independently with probability p, kept
ones are scaled so the expectation is unchanged, the gradient is the same mask, and nothing happens in eval mode.
Checked by counting against the binomial distribution, not by re-running the sampler."""

import math

import pytest
import torch
from conftest import random_batch, tiny_config
from torch import nn

from aayn import AaynForConditionalGeneration
from aayn.ops_aayn import AaynDropout


def within_binomial(count: int, trials: int, p: float, sigmas: float = 6.0) -> bool:
    return abs(count - trials * p) <= sigmas * math.sqrt(trials * p * (1 - p))


@pytest.mark.parametrize("p", [0.1, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_drop_rate_scale_and_independence(p, dtype):
    dropout = AaynDropout(p).train()
    x = torch.rand(50, 4001, dtype=dtype) + 1  # an element count that is not a multiple of 4; no zeros of its own
    out = dropout(x)
    dropped = out == 0
    assert within_binomial(int(dropped.sum()), x.numel(), p)
    # every one of the four 16-bit words of a draw, and neighbouring elements jointly, are unbiased
    flat = dropped.flatten()
    for word in range(4):
        lane = flat[word : flat.numel() - (flat.numel() - word) % 4 : 4]
        assert within_binomial(int(lane.sum()), lane.numel(), p)
    pairs = flat[:-1] & flat[1:]
    assert within_binomial(int(pairs.sum()), pairs.numel(), p * p)
    # kept values are scaled by 1 / (1 - p'), p' being p to 1/65536
    kept_probability = 1 - round(p * 65536) / 65536
    assert abs(kept_probability - (1 - p)) < 1e-5
    scale = torch.tensor(1 / kept_probability, dtype=torch.float32)  # rounded once, as F.dropout's CPU kernel does
    expected = (x.float() * scale).to(dtype)
    torch.testing.assert_close(out[~dropped], expected[~dropped], rtol=0, atol=0)
    assert out.dtype == dtype and out.shape == x.shape


def test_gradient_is_the_mask_and_eval_is_identity():
    dropout = AaynDropout(0.2).train()
    x = (torch.rand(7, 33, 5) + 1).requires_grad_()
    grad = torch.randn(7, 33, 5)
    out = dropout(x)
    out.backward(grad)
    torch.testing.assert_close(x.grad, grad * out.detach() / x.detach())  # 0 where dropped, the scale where kept
    residual = torch.randn(7, 33, 5)
    torch.manual_seed(3)
    added = dropout.add_to(residual, x)
    torch.manual_seed(3)
    torch.testing.assert_close(added, residual + dropout(x))  # up to the rounding of the fused sum
    dropout.eval()
    assert torch.equal(dropout(x), x) and torch.equal(dropout.add_to(residual, x), residual + x)
    assert torch.equal(AaynDropout(0.0).train()(x), x)


def test_a_seed_reproduces_the_masks_and_is_a_dropout():
    assert isinstance(AaynDropout(0.1), nn.Dropout)  # code that finds dropout layers by type still finds these
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(tiny_config(dropout=0.3)).train()
    ids, mask = random_batch(4, 9, model.config.vocab_size)

    def loss(seed):
        torch.manual_seed(seed)
        return model(input_ids=ids, attention_mask=mask, labels=ids).loss

    assert torch.equal(loss(1), loss(1))
    assert not torch.equal(loss(1), loss(2))
