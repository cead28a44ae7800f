"""Training corners: the fused loss computes only the gradients that are needed, a batch without target tokens
gives a loss of 0 and zero gradients (not 0 / 0), and a training step never reads a tensor back to the host."""

import pytest
import torch
from host_reads import HostReads, on_an_accelerator
from tiny_models import ONCE_ACROSS_LINES, random_batch, tiny_config
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


def test_the_host_read_counter_sees_what_it_counts():
    """The counter of the next test, against the calls it must see."""
    mask = torch.tensor([[1, 1, 0]])
    with HostReads() as counted:
        bool(mask.all())
        mask[mask.bool()]
        mask.nonzero()
        torch.zeros(3)[torch.tensor([True, False, True])] = 1.0
    assert len(counted.reads) == 4, counted.reads


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("num_items", [False, True])
def test_a_training_step_with_padding_reads_nothing_back_to_the_host(attn_implementation, num_items, monkeypatch):
    """Padding on both sides, unlabelled positions, forward and backward; with the Trainer's
    `num_items_in_batch` (a tensor) and without it. The masks' forms are chosen from shapes, and the loss weights
    unlabelled rows 0 instead of selecting the labelled ones (its values: test_loss_normalization.py)."""
    device = on_an_accelerator(monkeypatch)
    model = AaynForConditionalGeneration(tiny_config(attn_implementation=attn_implementation)).train().to(device)
    source, mask = random_batch(3, 9, 40, [9, 4, 6])
    labels, label_mask = random_batch(3, 7, 40, [7, 2, 5])
    labels = labels.masked_fill(label_mask == 0, -100)
    source, mask, labels = source.to(device), mask.to(device), labels.to(device)
    kwargs = {"num_items_in_batch": (labels != -100).sum()} if num_items else {}
    with HostReads() as counted:
        model(input_ids=source, attention_mask=mask, labels=labels, **kwargs).loss.backward()
    assert counted.reads == []
    assert all(p.grad is not None for p in model.parameters())


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


def test_torch_compile_trains_as_eager_without_a_graph_break():
    """torch.compile (aot_eager: dynamo's graphs and AOT autograd, without a C++ toolchain) gives eager's loss and
    gradients, and traces a training step with padding as one graph: no host read breaks it (the token-id range
    check, the masks' forms and the loss's unlabelled rows are all decided without reading values)."""
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
    assert explained.graph_break_count == 0, [str(reason.reason) for reason in explained.break_reasons]
    assert explained.graph_count == 1
    torch._dynamo.reset()


def test_a_compiled_step_over_length_buckets_compiles_once_a_shape_and_trains_as_eager():
    """`torch.compile` (static shapes, aot_eager) of a training step over `MaxTokensBatchSampler`'s bucketed batches
    padded by `BucketPadding`: one compilation per (sentences, bucket) shape, at most two a bucket, where the same
    data's longest-padded batches have more shapes (each one more compilation); each step's loss is eager's."""
    from aayn.data import MaxTokensBatchSampler
    from aayn.data.batching import BucketPadding

    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 24, (100,), generator=generator).tolist()
    examples = [torch.randint(4, 40, (n,), generator=generator).tolist() for n in lengths]

    def longest(features):  # a collator that pads to the batch's longest sentence
        width = max(len(f["input_ids"]) for f in features)
        padded = lambda key, fill: torch.tensor([f[key] + [fill] * (width - len(f[key])) for f in features])
        mask = torch.tensor([[1] * len(f["input_ids"]) + [0] * (width - len(f["input_ids"])) for f in features])
        return {"input_ids": padded("input_ids", 0), "attention_mask": mask, "labels": padded("labels", -100)}

    def batches(sampler, collate):
        return [collate([{"input_ids": examples[i], "labels": examples[i]} for i in b]) for b in sampler]

    buckets = [8, 16, 24]
    bucketed = batches(MaxTokensBatchSampler(lengths, 96, buckets=buckets), BucketPadding(longest, buckets, 0))
    shapes = {tuple(batch["input_ids"].shape) for batch in bucketed}
    plain = {tuple(batch["input_ids"].shape) for batch in batches(MaxTokensBatchSampler(lengths, 96), longest)}
    assert len(shapes) <= 2 * len(buckets) < len(plain), (shapes, plain)
    torch._dynamo.reset()
    model = AaynForConditionalGeneration(tiny_config()).train()
    step = lambda batch: model(**batch).loss
    compiled = torch.compile(step, backend="aot_eager", dynamic=False)
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for batch in bucketed:
        torch.testing.assert_close(compiled(batch), step(batch))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == len(shapes)
    torch._dynamo.reset()


# the paper's search is aayn's own code on either transformers line (its compile takes a minute): once
@pytest.mark.parametrize("paper_decoding", [pytest.param(True, marks=ONCE_ACROSS_LINES), False])
def test_compiled_encoder_and_decoder_decode_as_eager(paper_decoding):
    """`Module.compile` of the encoder and decoder in place (what the paper's search and transformers' call):
    the same translations as eager. The paper's search compiles a bounded number of graphs, not one per step: the
    encoder, the first step, the first two cached steps (the second makes the positions dynamic: the cache counts
    them in a tensor's size, not in a Python number) and the step whose keys fill the cache's buffers; 8 steps."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    model = AaynForConditionalGeneration(tiny_config()).eval()
    source, mask = random_batch(2, 7, 40, [7, 4])
    steps = 8 if paper_decoding else 3  # transformers' search: 2 cached steps
    kwargs = dict(attention_mask=mask, num_beams=3, max_new_tokens=steps, paper_decoding=paper_decoding)
    expected = model.generate(source, **kwargs)
    model.model.encoder.compile(backend="aot_eager", dynamic=True)
    model.model.decoder.compile(backend="aot_eager", dynamic=True)
    before = counters["stats"]["unique_graphs"]
    assert torch.equal(model.generate(source, **kwargs), expected)
    if paper_decoding:
        assert counters["stats"]["unique_graphs"] - before <= 5
    torch._dynamo.reset()


@ONCE_ACROSS_LINES  # aayn's own kernels under the compiler (a minute of Inductor on 2 cores): once
def test_a_training_step_with_dropout_compiles_whole_and_matches_eager_on_the_same_random_stream(monkeypatch):
    """`torch.compile(fullgraph=True)` (Inductor, CPU) of a training step with every dropout on: under the compiler
    dropout is `F.dropout` (the eager CPU mask kernel's `Tensor.random_` cannot be traced), and with Inductor's
    `fallback_random` its random numbers come from torch's generator as eager `F.dropout`'s do. The reference is
    eager with `F.dropout` in place of that kernel (its own stream differs; its distribution: test_dropout.py), from
    the same seed: the same loss and gradients. Inductor's scalar kernels (`cpp.vec_isa_ok=False`): the random stream
    and the whole graph are what is tested, and the vectorized kernels' C++ takes 30 s longer to compile here."""
    from torch._inductor import config as inductor_config

    from aayn.model.ops_aayn import AaynDropout

    torch._dynamo.reset()
    config = tiny_config(dropout=0.3, attention_dropout=0.2, activation_dropout=0.1)
    model = AaynForConditionalGeneration(config).train()
    source, mask = random_batch(2, 6, 40, [6, 4])
    labels, _ = random_batch(2, 5, 40)
    labels[1, 3:] = -100

    def loss_of(source, mask, labels):
        return model(input_ids=source, attention_mask=mask, labels=labels).loss

    def step(loss_fn, seed: int):
        torch.manual_seed(seed)
        loss = loss_fn(source, mask, labels)
        loss.backward()
        gradients = {name: p.grad.clone() for name, p in model.named_parameters()}
        model.zero_grad()
        return loss.detach(), gradients

    with inductor_config.patch({"fallback_random": True, "cpp.vec_isa_ok": False}):  # see the docstring
        compiled = torch.compile(loss_of, fullgraph=True)
        loss, gradients = step(compiled, 7)
        other_seed, _ = step(compiled, 8)
        monkeypatch.setattr(AaynDropout, "keep", lambda self, x: None)  # eager F.dropout
        eager_loss, eager_gradients = step(loss_of, 7)
    torch.testing.assert_close(loss, eager_loss)
    for name, gradient in eager_gradients.items():
        torch.testing.assert_close(gradients[name], gradient, msg=name)
    assert not torch.equal(other_seed, loss)  # other masks: the compiled step draws them
    torch._dynamo.reset()


def test_gradient_checkpointing_gives_the_same_gradients():
    source, mask = random_batch(2, 6, 40, [6, 4])
    labels, _ = random_batch(2, 5, 40)
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = AaynForConditionalGeneration(tiny_config()).train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            assert model.model.encoder.layers[0].gradient_checkpointing
        model(input_ids=source, attention_mask=mask, labels=labels).loss.backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-6, rtol=0, msg=name)
