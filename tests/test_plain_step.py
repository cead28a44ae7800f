"""Past its first step, the search runs the decoder's own code outside the modules' call machinery
(`AaynDecoder.step`, the modules' `forward` called directly) wherever that computes what the modules' calls
compute. Checked against the modules' own path, which a user's hook forces (as it must: a hook has to see every
step), and the cases that must keep that path."""

import pytest
import torch
from tiny_models import random_batch, tiny_config

from aayn import AaynForConditionalGeneration
from aayn.model import decoding_aayn
from aayn.model.modeling_aayn import AaynDecoder


def float_model(**overrides):
    torch.manual_seed(0)
    return AaynForConditionalGeneration(tiny_config(**overrides)).eval()


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_plain_steps_decode_exactly_as_the_modules_do(attn_implementation, norm_first, num_beams, monkeypatch):
    model = float_model(norm_first=norm_first)
    model.config._attn_implementation = attn_implementation
    plain_steps = []
    step = AaynDecoder.step
    monkeypatch.setattr(AaynDecoder, "step", lambda *args: plain_steps.append(1) or step(*args))
    source, mask = random_batch(3, 8, 40, [8, 3, 5])
    kwargs = dict(attention_mask=mask, num_beams=num_beams, num_return_sequences=num_beams, max_new_tokens=10)
    plain = model.generate(source, return_dict_in_generate=True, **kwargs)
    assert len(plain_steps) >= 5  # every step after the first

    hooked = []  # a user's hook on one projection: the modules' path runs every step, the hook sees each
    model.get_decoder().layers[-1].feed_forward.fc2.register_forward_hook(lambda *args: hooked.append(1))
    steps = len(plain_steps) + 1
    plain_steps.clear()
    modules = model.generate(source, return_dict_in_generate=True, **kwargs)
    assert not plain_steps and len(hooked) == steps

    assert torch.equal(plain.sequences, modules.sequences)
    if num_beams > 1:
        assert torch.equal(plain.sequences_scores, modules.sequences_scores)  # not close: the same float32 values


def test_the_modules_path_is_kept_where_a_plain_step_would_differ():
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
    for name in ("output_attentions", "output_hidden_states"):  # recorded by the modules' calls
        setattr(model.config, name, True)
        assert not decoding_aayn.plain_steps(decoder)
        setattr(model.config, name, False)
    model.config._attn_implementation = "flex_attention"  # no folded search, no plain kernel
    assert not decoding_aayn.plain_steps(decoder)
    model.config._attn_implementation = "sdpa"
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: None)  # a global hook
    try:
        assert not decoding_aayn.plain_steps(decoder)
    finally:
        handle.remove()
    decoder.layers[0].encoder_attn.compile()  # a compiled module must be called, not bypassed
    assert not decoding_aayn.plain_steps(decoder)
