"""Past its first step, the search runs the decoder's layers through `AaynDecoder.step` (no output recording, no
masks built: the cache lays the step out) with the attention kernels the cache names (`DecoderCache.
attention_kernel`), wherever that computes what the decoder's `forward` computes. Checked against `forward`'s own
path every step (forced by `plain_steps` returning False), and the cases that must keep that path."""

import pytest
import torch
from tiny_models import random_batch, tiny_config

from aayn import AaynForConditionalGeneration
from aayn.model import decoding_aayn, ops_aayn
from aayn.model.modeling_aayn import AaynDecoder


def float_model(**overrides):
    torch.manual_seed(0)
    return AaynForConditionalGeneration(tiny_config(**overrides)).eval()


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_plain_steps_decode_exactly_as_the_modules_do(attn_implementation, norm_first, num_beams, monkeypatch):
    """Mutations caught: the step skipping the final norm, the positions or a sub-layer (outputs differ); the step
    calling a module's `forward` past its call (the user's hook misses steps); the cache never naming its kernel
    (the kernel's call count is 0)."""
    model = float_model(norm_first=norm_first)
    model.config._attn_implementation = attn_implementation
    plain_steps, kernel_calls = [], []
    step = AaynDecoder.step
    monkeypatch.setattr(AaynDecoder, "step", lambda *args: plain_steps.append(1) or step(*args))
    kernel = ops_aayn.STEP_ATTENTION[attn_implementation]
    monkeypatch.setitem(ops_aayn.STEP_ATTENTION, attn_implementation, lambda *a: kernel_calls.append(1) or kernel(*a))
    hooked = []  # a user's hook on one projection sees every step, on either path
    model.get_decoder().layers[-1].feed_forward.fc2.register_forward_hook(lambda *args: hooked.append(1))
    source, mask = random_batch(3, 8, 40, [8, 3, 5])
    kwargs = dict(attention_mask=mask, num_beams=num_beams, num_return_sequences=num_beams, max_new_tokens=10)
    plain = model.generate(source, return_dict_in_generate=True, **kwargs)
    steps = len(plain_steps) + 1
    assert len(plain_steps) >= 5 and len(hooked) == steps  # every step after the first, each seen by the hook
    assert len(kernel_calls) >= len(plain_steps) * 2 * model.config.decoder_layers  # self- and cross-attention

    monkeypatch.setattr(decoding_aayn, "plain_steps", lambda decoder: False)  # forward's own path every step
    plain_steps.clear(), hooked.clear(), kernel_calls.clear()
    modules = model.generate(source, return_dict_in_generate=True, **kwargs)
    assert not plain_steps and not kernel_calls and len(hooked) == steps

    assert torch.equal(plain.sequences, modules.sequences)
    if num_beams > 1:
        assert torch.equal(plain.sequences_scores, modules.sequences_scores)  # not close: the same float32 values


def test_the_modules_path_is_kept_where_a_plain_step_would_differ():
    """Mutations caught: `plain_steps` ignoring training mode, a single module in training, recorded outputs, or
    an attention function without a step kernel."""
    model = float_model()
    decoder = model.get_decoder()
    assert decoding_aayn.plain_steps(decoder)
    assert not decoding_aayn.plain_steps(model.train().get_decoder())  # dropout
    model.eval()
    decoder.layers[1].feed_forward.activation_dropout.train()  # one module in training: its dropout runs
    assert not decoding_aayn.plain_steps(decoder)
    model.eval()
    model.config._attn_implementation = "eager"  # the one that records attention weights
    assert decoding_aayn.plain_steps(decoder)
    for name in ("output_attentions", "output_hidden_states"):  # recorded by forward
        setattr(model.config, name, True)
        assert not decoding_aayn.plain_steps(decoder)
        setattr(model.config, name, False)
    model.config._attn_implementation = "flex_attention"  # no folded search, no plain kernel
    assert not decoding_aayn.plain_steps(decoder)


def test_a_compiled_module_runs_compiled_inside_the_plain_steps(monkeypatch):
    """A module the user compiled is called, so its compiled call runs at every step (mutation caught: the step
    calling the module's `forward` past its call, which skips the compiled code: the counter stays at the first
    step's one)."""
    model = float_model()
    decoder = model.get_decoder()
    fc1 = decoder.layers[0].feed_forward.fc1
    calls = []
    monkeypatch.setattr(fc1, "_compiled_call_impl", lambda *args: calls.append(1) or fc1.forward(*args))
    source, mask = random_batch(2, 6, 40, [6, 4])
    reference = float_model().generate(source, attention_mask=mask, num_beams=2, max_new_tokens=6)
    output = model.generate(source, attention_mask=mask, num_beams=2, max_new_tokens=6)
    assert torch.equal(output, reference) and len(calls) == output.shape[1] - 1


def test_compiled_steps_search_as_the_eager_steps_on_as_few_rows_as_the_sentences_need(monkeypatch):
    """`generate(compiled_steps=True)`: the static steps compiled by torch.compile (inductor, dynamic shapes) give
    the plain steps' sequences and, to float rounding, scores, for beam 4 over three sentences and greedy over one;
    one compiled function serves both; on the CPU a graph holds as few rows as the sentences need (one sentence: one
    row, not `MIN_ROWS`). Mutations caught: the option not reaching `Decoding` (no compiled call counted), a
    compiled function made per search (two made), `MIN_ROWS` rows for one sentence, the static step given another
    position table (outputs differ)."""
    from aayn.formats.aayn import cuda_graphs

    model = float_model()
    monkeypatch.setattr(cuda_graphs, "_COMPILED", [])
    made, compile_ = [], torch.compile
    monkeypatch.setattr(torch, "compile", lambda *args, **kwargs: made.append(1) or compile_(*args, **kwargs))
    calls, compiled_static_step = [], cuda_graphs.compiled_static_step
    monkeypatch.setattr(cuda_graphs, "compiled_static_step", lambda: calls.append(1) or compiled_static_step())
    rows, start = [], cuda_graphs.GraphedSteps.__init__

    def recorded(self, *args):
        start(self, *args)
        rows.append(self.entry.slots.ancestry.shape[0])

    monkeypatch.setattr(cuda_graphs.GraphedSteps, "__init__", recorded)
    for sentences, beams in ((3, 4), (1, 1)):
        source, mask = random_batch(sentences, 8, 40, [8, 3, 5][:sentences])
        kwargs = dict(attention_mask=mask, num_beams=beams, max_new_tokens=8, return_dict_in_generate=True)
        plain = model.generate(source, **kwargs)
        calls.clear()
        compiled = model.generate(source, compiled_steps=True, **kwargs)
        assert calls, "the compiled steps never ran"
        assert torch.equal(compiled.sequences, plain.sequences)
        if beams > 1:
            torch.testing.assert_close(compiled.sequences_scores, plain.sequences_scores, rtol=1e-5, atol=1e-5)
    assert len(made) == 1 and rows == [4, 1]  # three sentences: the next power of two; one: one row
