"""§5.4's dropout as the model applies it on CPU (`AaynDropout`: 16 random bits per element, four elements per
64-bit draw) behaves as `torch.nn.Dropout` does: each element is zeroed independently with probability p, kept
ones are scaled so the expectation is unchanged, the gradient is the same mask, and nothing happens in eval mode.
Checked by counting against the binomial distribution, not by re-running the sampler."""

import math

import pytest
import torch
from tiny_models import random_batch, tiny_config
from torch import nn

from aayn import AaynForConditionalGeneration
from aayn.model.ops_aayn import AaynDropout


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
    # every kept value is x times one scale, rounded once (as F.dropout's CPU kernel rounds), and that scale
    # keeps the expectation: the mean of out equals the mean of x within the binomial spread of the mask
    scale = (out[~dropped].float() / x[~dropped].float()).median()
    torch.testing.assert_close(out[~dropped], (x[~dropped].float() * scale).to(dtype), rtol=0, atol=0)
    spread = 6 * math.sqrt(p / (1 - p) / x.numel()) * float(x.float().std() / x.float().mean() + 1)
    assert abs(float(out.float().mean() / x.float().mean()) - 1) < spread
    assert out.dtype == dtype and out.shape == x.shape


def test_gradient_is_the_mask_and_eval_is_identity():
    dropout = AaynDropout(0.2).train()
    x = (torch.rand(7, 33, 5) + 1).requires_grad_()
    grad = torch.randn(7, 33, 5)
    out = dropout(x)
    out.backward(grad)
    torch.testing.assert_close(x.grad, grad * out.detach() / x.detach())  # 0 where dropped, the scale where kept
    # add_to is residual + dropout(x): what it adds is 0 or x times one scale, dropped at the rate p
    residual = torch.randn(700, 33, 5)
    wide = torch.rand(700, 33, 5) + 1
    added = (dropout.add_to(residual, wide) - residual) / wide
    kept = added.abs() > 0.5
    assert within_binomial(int((~kept).sum()), added.numel(), 0.2)
    torch.testing.assert_close(added[kept], torch.full_like(added[kept], 1 / 0.8), rtol=1e-5, atol=1e-5)
    assert added[~kept].abs().max() < 1e-5
    residual = residual[:7]
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
