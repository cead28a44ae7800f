"""MarianMTModel with mapped weights is the same network: the comparison in `aayn bench` is of equal models."""

import pytest
import torch
from transformers import MarianMTModel

from aayn import AaynForConditionalGeneration
from aayn.marian import aayn_state_dict_from_marian, marian_config_for, residual_permutation

from conftest import random_batch, tiny_config


def test_residual_permutation_maps_marians_sinusoid_layout_onto_ours():
    from aayn.modeling_aayn import sinusoidal_positions

    marian = MarianMTModel(marian_config_for(tiny_config()))
    positions = marian.model.encoder.embed_positions(torch.Size([1, 20]))
    assert torch.allclose(positions[:, residual_permutation(32)], sinusoidal_positions(0, 20, 32, positions.device), atol=1e-6)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_marian_with_mapped_weights_gives_our_logits_and_translations(num_beams):
    config = tiny_config()
    torch.manual_seed(0)
    marian = MarianMTModel(marian_config_for(config)).eval()
    with torch.no_grad():  # the paper's init scale rather than Marian's N(0, 0.02), so that decoding varies
        for name, parameter in marian.named_parameters():
            if parameter.dim() > 1 and "embed_positions" not in name:  # positions are fixed sinusoids
                torch.nn.init.xavier_uniform_(parameter)
        marian.model.shared.weight.normal_(0, 1)
    ours = AaynForConditionalGeneration(config).eval()
    missing, unexpected = ours.load_state_dict(aayn_state_dict_from_marian(marian), strict=False)
    assert not unexpected and all(".embed.embed_tokens." in key or key == "lm_head.weight" for key in missing)
    source, mask = random_batch(3, 9, config.vocab_size, [9, 5, 7])
    target, _ = random_batch(3, 6, config.vocab_size)
    with torch.no_grad():
        expected = marian(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
        actual = ours(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-5)
    kwargs = dict(attention_mask=mask, num_beams=num_beams, do_sample=False, max_new_tokens=12)
    marian_tokens = marian.generate(source, **kwargs)
    assert torch.equal(ours.generate(source, paper_decoding=False, **kwargs), marian_tokens)  # transformers' search
    assert len({tuple(row.tolist()) for row in marian_tokens}) > 1


def test_marian_cannot_mirror_a_pre_norm_model():
    with pytest.raises(ValueError, match="norm_first must be False"):
        marian_config_for(tiny_config(norm_first=True))
