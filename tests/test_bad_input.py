import logging

import pytest
import torch
from tiny_models import random_batch, tiny_config
from transformers import DynamicCache

from aayn import AaynForConditionalGeneration
from aayn.model.modeling_aayn import sinusoidal_positions

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


@pytest.fixture
def model():
    return AaynForConditionalGeneration(tiny_config()).eval()


@pytest.mark.parametrize("bad_id", [40, 1000, -1])
def test_token_ids_outside_the_vocabulary_are_a_clear_error(model, bad_id):
    source, _ = random_batch(2, 5, 40)
    source[1, 2] = bad_id
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 40\)"):
        model(input_ids=source, decoder_input_ids=source[:, :2])
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 40\)"):
        model(input_ids=source[:, :2] % 40, decoder_input_ids=source)


def test_inputs_longer_than_max_positions_extend_the_sinusoid_with_a_warning(model, caplog):
    long_source, _ = random_batch(1, 80, 40)  # max_position_embeddings=64
    with caplog.at_level(logging.WARNING), torch.no_grad():
        logits = model(input_ids=long_source, decoder_input_ids=long_source[:, :3]).logits
    assert torch.isfinite(logits).all()
    embed = model.model.encoder.embed
    with torch.no_grad():
        expected = embed.embed_tokens(long_source) * embed.scale + sinusoidal_positions(0, 80, 32, long_source.device)
        assert torch.allclose(embed(long_source, None), expected)
    assert "exceeds max_position_embeddings=64" in caplog.text


def test_exactly_one_of_ids_and_embeddings(model):
    source, _ = random_batch(1, 4, 40)
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        model(input_ids=source, inputs_embeds=torch.zeros(1, 4, 32), decoder_input_ids=source)
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        model(decoder_input_ids=source)


def test_a_decoder_only_cache_is_rejected(model):
    source, _ = random_batch(1, 4, 40)
    with pytest.raises(TypeError, match="past_key_values must be an EncoderDecoderCache, got DynamicCache"):
        model(input_ids=source, decoder_input_ids=source, past_key_values=DynamicCache(), use_cache=True)


def test_labels_give_the_masked_cross_entropy_of_the_shifted_target(model):
    source, _ = random_batch(2, 5, 40)
    labels, _ = random_batch(2, 4, 40)
    labels[1, 2:] = -100
    out = model(input_ids=source, labels=labels)
    decoder_input_ids = torch.cat([torch.full((2, 1), model.config.decoder_start_token_id), labels[:, :-1]], dim=1)
    decoder_input_ids[decoder_input_ids == -100] = model.config.pad_token_id
    logits = model(input_ids=source, decoder_input_ids=decoder_input_ids).logits
    kept = labels != -100
    expected = -torch.log_softmax(logits, -1)[kept].gather(-1, labels[kept][:, None]).mean()
    torch.testing.assert_close(out.loss, expected)
    assert out.past_key_values is None  # training never builds a cache


def test_forward_refuses_arguments_it_does_not_honour(model):
    """`head_mask` and the like are refused by name, not swallowed; generate's `cache_position` is taken."""
    source, mask = random_batch(2, 5, 40, [5, 3])
    target, _ = random_batch(2, 4, 40)
    encoder_states = model.model.encoder(source, mask).last_hidden_state
    calls = {
        "AaynForConditionalGeneration.forward": lambda **extra: model(source, mask, target, **extra),
        "AaynModel.forward": lambda **extra: model.model(source, mask, target, **extra),
        "AaynEncoder.forward": lambda **extra: model.model.encoder(source, mask, **extra),
        "AaynDecoder.forward": lambda **extra: model.model.decoder(target, encoder_states, **extra),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError, match=rf"^{name}\(\) got arguments it does not take: head_mask, position_ids$"):
            call(head_mask=torch.ones(2, 4), position_ids=torch.arange(4))
    assert model(source, mask, target, cache_position=torch.arange(4)).logits.shape == (2, 4, 40)
