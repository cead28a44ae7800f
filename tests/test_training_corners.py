"""Training corners: the fused loss computes only the gradients that are needed, and a batch without target tokens
gives a loss of 0 and zero gradients (not 0 / 0)."""

import pytest
import torch
from conftest import random_batch, tiny_config
from torch.utils._python_dispatch import TorchDispatchMode

from aayn import AaynForConditionalGeneration


class Shapes(TorchDispatchMode):
    """The shapes of every tensor the ops produce."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor):
                self.shapes.append(tuple(tensor.shape))
        return out


@pytest.mark.parametrize("frozen", [False, True])
def test_a_frozen_output_matrix_costs_no_weight_gradient(frozen):
    vocab, d = 300, 32
    model = AaynForConditionalGeneration(tiny_config(vocab_size=vocab)).train()
    model.model.shared.weight.requires_grad_(not frozen)  # the tied embedding and output matrix
    source, mask = random_batch(4, 9, vocab)
    labels, _ = random_batch(4, 7, vocab)
    with Shapes() as recorded:
        model(input_ids=source, attention_mask=mask, labels=labels).loss.backward()
    weight_sized = recorded.shapes.count((vocab, d))
    if frozen:
        assert weight_sized == 0 and model.model.shared.weight.grad is None
        assert model.model.encoder.layers[0].feed_forward.fc1.weight.grad is not None  # the rest still learns
    else:
        assert weight_sized > 0 and model.model.shared.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("items", [None, 0, torch.tensor(0)])
def test_a_batch_without_target_tokens_gives_loss_0_and_zero_gradients(fused, items):
    model = AaynForConditionalGeneration(tiny_config()).train()
    source, mask = random_batch(2, 5, 40)
    labels = torch.full((2, 4), -100)
    kwargs = {} if items is None else {"num_items_in_batch": items}
    loss = model(input_ids=source, attention_mask=mask, labels=labels, return_logits=not fused, **kwargs).loss
    loss.backward()
    assert loss.item() == 0.0
    assert all(torch.isfinite(p.grad).all() and not p.grad.any() for p in model.parameters() if p.grad is not None)


def test_torch_compile_trains_as_eager_and_its_graph_breaks_are_the_known_ones():
    """torch.compile (aot_eager: dynamo's graphs and AOT autograd, without a C++ toolchain) gives eager's loss and
    gradients. The forward's graph breaks come only from the two host reads left in a training step (whether a
    padding mask has padding, in attention_mask_for; the loss's selection of labelled rows): the token-id range
    check no longer reads the ids back (issue 32 removes the other two)."""
    torch._dynamo.reset()
    model = AaynForConditionalGeneration(tiny_config()).train()
    source, mask = random_batch(2, 6, 40, [6, 4])
    labels, _ = random_batch(2, 5, 40)
    labels[1, 3:] = -100

    def step(source, mask, labels):
        return model(input_ids=source, attention_mask=mask, labels=labels).loss

    eager = step(source, mask, labels)
    eager.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    compiled = torch.compile(step, backend="aot_eager")(source, mask, labels)
    compiled.backward()
    torch.testing.assert_close(compiled, eager)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], msg=name)
    explained = torch._dynamo.explain(step)(source, mask, labels)
    places = {frame.name for reason in explained.break_reasons for frame in reason.user_stack[-1:]}
    assert places <= {"attention_mask_for", "fused_label_smoothed_loss"}, places
    assert not any("aminmax" in str(reason.reason) for reason in explained.break_reasons)
    torch._dynamo.reset()


@pytest.mark.parametrize("paper_decoding", [True, False])
def test_compiled_encoder_and_decoder_decode_as_eager(paper_decoding):
    """`Module.compile` of the encoder and decoder in place (what the paper's search and transformers' call):
    the same translations as eager."""
    torch._dynamo.reset()
    model = AaynForConditionalGeneration(tiny_config()).eval()
    source, mask = random_batch(3, 7, 40, [7, 4, 2])
    kwargs = dict(attention_mask=mask, num_beams=3, max_new_tokens=6, paper_decoding=paper_decoding)
    expected = model.generate(source, **kwargs)
    model.model.encoder.compile(backend="aot_eager", dynamic=True)
    model.model.decoder.compile(backend="aot_eager", dynamic=True)
    assert torch.equal(model.generate(source, **kwargs), expected)
    torch._dynamo.reset()
