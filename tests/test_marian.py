"""MarianMTModel with mapped weights is the same network: the comparison in `aayn bench` is of equal models."""

import pytest
import torch
from tiny_models import random_batch, tiny_config
from transformers import MarianMTModel

from aayn import AaynForConditionalGeneration
from aayn.formats.marian.weights import aayn_state_dict_from_marian, marian_config_for, residual_permutation

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def test_residual_permutation_maps_marians_sinusoid_layout_onto_ours():
    from aayn.model.modeling_aayn import sinusoidal_positions

    marian = MarianMTModel(marian_config_for(tiny_config()))
    positions = marian.model.encoder.embed_positions(torch.Size([1, 20]))
    assert torch.allclose(
        positions[:, residual_permutation(32)], sinusoidal_positions(0, 20, 32, positions.device), atol=1e-6
    )


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


def test_under_bf16_autocast_our_loss_is_marians():
    """On CPU, autocast computes the output layer in bfloat16 and does not upcast log_softmax: Marian's logits are
    float32 (its float32 output bias), so ours must be too, or a loss taken inside autocast runs in bfloat16 (the
    Trainer is safe either way: Accelerate converts the outputs of the autocast forward to float32)."""
    from transformers.trainer_pt_utils import LabelSmoother

    config = tiny_config(dropout=0.0)
    torch.manual_seed(0)
    marian = MarianMTModel(marian_config_for(config)).eval()
    ours = AaynForConditionalGeneration(config).eval()
    ours.load_state_dict(aayn_state_dict_from_marian(marian), strict=False)
    source, mask = random_batch(4, 9, config.vocab_size, [9, 5, 7, 8])
    labels, _ = random_batch(4, 7, config.vocab_size)
    smoother = LabelSmoother(epsilon=0.1)
    losses = {}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for name, model in (("aayn", ours), ("marian", marian)):
            decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels=labels)
            outputs = model(input_ids=source, attention_mask=mask, decoder_input_ids=decoder_input_ids)
            assert outputs.logits.dtype == torch.float32, name
            losses[name] = smoother(outputs, labels)
    torch.testing.assert_close(losses["aayn"], losses["marian"], atol=2e-3, rtol=0)
    assert ours.to(torch.bfloat16)(input_ids=source, decoder_input_ids=labels).logits.dtype == torch.bfloat16


def test_trained_from_the_same_weights_we_stay_marian():
    """Training is the same too: Adam steps on the label-smoothed loss of padded batches, from mapped weights,
    keep our weights equal to Marian's mapped ones (gradients through the tied embedding and the fused QKV alike).
    Ours takes the loss itself, fused with the output layer; Marian's comes from the Trainer's LabelSmoother."""
    from transformers.trainer_pt_utils import LabelSmoother

    config = tiny_config(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, label_smoothing=0.1)
    torch.manual_seed(0)
    marian = MarianMTModel(marian_config_for(config)).train()
    ours = AaynForConditionalGeneration(config).train()
    ours.load_state_dict(aayn_state_dict_from_marian(marian), strict=False)
    optimizers = {name: torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
                  for name, model in (("aayn", ours), ("marian", marian))}  # fmt: skip
    smoother = LabelSmoother(epsilon=0.1)
    initial = marian.model.shared.weight.detach().clone()
    for _ in range(5):
        source, mask = random_batch(4, 9, config.vocab_size, [9, 5, 7, 8])
        labels, label_mask = random_batch(4, 7, config.vocab_size, [7, 3, 6, 4])
        labels = labels.masked_fill(label_mask == 0, -100)
        for name, model in (("aayn", ours), ("marian", marian)):
            if name == "aayn":
                loss = model(input_ids=source, attention_mask=mask, labels=labels).loss
            else:
                decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels=labels)
                loss = smoother(
                    model(input_ids=source, attention_mask=mask, decoder_input_ids=decoder_input_ids), labels
                )
            optimizers[name].zero_grad()
            loss.backward()
            optimizers[name].step()
    trained = ours.state_dict()
    expected = aayn_state_dict_from_marian(marian)
    assert not torch.equal(marian.model.shared.weight, initial)  # the steps moved the weights
    d = config.d_model
    for name, weight in expected.items():
        mine = trained[name]
        if name.endswith(("qkv_proj.bias", "kv_proj.bias")):
            # the key bias adds the same q.b to every score of a query, which softmax ignores: its true gradient is
            # zero and Adam (eps 1e-9) turns rounding noise into steps. Compare the query and value biases.
            keys = slice(d, 2 * d) if name.endswith("qkv_proj.bias") else slice(0, d)
            keep = torch.ones_like(weight, dtype=torch.bool)
            keep[keys] = False
            mine, weight = mine[keep], weight[keep]
        torch.testing.assert_close(mine, weight, atol=1e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    assert ours.lm_head.weight.data_ptr() == ours.model.shared.weight.data_ptr()


def test_with_init_std_our_initial_weights_are_drawn_like_marians():
    """`init_std` draws every weight from Marian's distribution: per mapped parameter, the same mean and spread
    (zero biases, identity LayerNorms, a zero padding row)."""
    config = tiny_config(d_model=64, vocab_size=500, init_std=0.02)
    torch.manual_seed(0)
    theirs = aayn_state_dict_from_marian(MarianMTModel(marian_config_for(config)))
    ours = AaynForConditionalGeneration(config).state_dict()
    for name, weight in theirs.items():
        mine = ours[name]
        if weight.std() == 0:  # biases, LayerNorm: constants
            assert torch.equal(mine, weight), name
        else:
            assert abs(mine.std() - weight.std()) < 0.1 * weight.std() and abs(mine.mean()) < 0.1 * weight.std(), name
    assert not ours["model.shared.weight"][config.pad_token_id].any()
    assert not theirs["model.shared.weight"][config.pad_token_id].any()


def test_marian_cannot_mirror_a_pre_norm_model():
    with pytest.raises(ValueError, match="norm_first must be False"):
        marian_config_for(tiny_config(norm_first=True))


def test_our_weights_map_back_onto_marian():
    from aayn.formats.marian.weights import marian_state_dict_from_aayn

    config = tiny_config(dropout=0.0)
    torch.manual_seed(0)
    ours = AaynForConditionalGeneration(config).eval()  # our own initialization, not Marian's
    marian = MarianMTModel(marian_config_for(config)).eval()
    marian.load_state_dict(marian_state_dict_from_aayn(ours, marian), strict=False)
    source, mask = random_batch(3, 8, config.vocab_size, [8, 5, 3])
    target, _ = random_batch(3, 6, config.vocab_size)
    with torch.no_grad():
        theirs = marian(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
        mine = ours(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
    torch.testing.assert_close(theirs, mine, atol=1e-5, rtol=1e-5)
