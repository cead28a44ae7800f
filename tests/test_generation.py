"""Incremental decoding, generate() with and without the cache, padding invariance, attention implementations."""

import math

import pytest
import torch
from tiny_models import random_batch, tiny_config

from aayn import AaynForConditionalGeneration
from aayn.model.modeling_aayn import EncoderDecoderCache

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def model_for(**overrides) -> AaynForConditionalGeneration:
    model = AaynForConditionalGeneration(tiny_config(**overrides)).eval()
    with torch.no_grad():  # sharper distributions than the init, so that greedy/beam outputs vary per sentence
        model.model.shared.weight.mul_(8)
    return model


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_step_by_step_logits_equal_the_full_forward(norm_first, attn_implementation):
    model = model_for(norm_first=norm_first).double()  # float64: any mismatch is a bug, not rounding
    model.config._attn_implementation = attn_implementation
    source, source_mask = random_batch(3, 9, 40, [9, 6, 2])
    target, _ = random_batch(3, 8, 40)
    with torch.no_grad():
        full = model(input_ids=source, attention_mask=source_mask, decoder_input_ids=target, use_cache=False).logits
        encoder_outputs = model.get_encoder()(source, source_mask)
        cache, steps = None, []
        for t in range(8):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=source_mask,
                decoder_input_ids=target[:, t : t + 1],
                past_key_values=cache,
                use_cache=True,
            )
            cache = out.past_key_values
            steps.append(out.logits)
        # a multi-token continuation over a cache (as in assisted decoding) needs the explicit causal mask
        out = model(
            encoder_outputs=encoder_outputs, attention_mask=source_mask, decoder_input_ids=target[:, :3], use_cache=True
        )
        rest = model(
            encoder_outputs=encoder_outputs,
            attention_mask=source_mask,
            decoder_input_ids=target[:, 3:],
            past_key_values=out.past_key_values,
            use_cache=True,
        )
    assert isinstance(cache, EncoderDecoderCache) and cache.get_seq_length() == 8
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-10, rtol=0)
    torch.testing.assert_close(torch.cat([out.logits, rest.logits], dim=1), full, atol=1e-10, rtol=0)


def test_cross_attention_keys_and_values_are_computed_once_per_sentence():
    model = model_for()
    calls = []
    for layer in model.model.decoder.layers:
        layer.encoder_attn.kv_proj.register_forward_hook(lambda *args: calls.append(1))
    source, mask = random_batch(2, 6, 40)
    model.generate(source, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert len(calls) == len(model.model.decoder.layers)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_is_the_same_with_and_without_the_cache(num_beams):
    model = model_for()
    source, mask = random_batch(4, 7, 40, [7, 5, 3, 6])
    kwargs = dict(attention_mask=mask, num_beams=num_beams, do_sample=False, max_new_tokens=10, paper_decoding=False)
    with_cache = model.generate(source, use_cache=True, **kwargs)
    without_cache = model.generate(source, use_cache=False, **kwargs)
    assert with_cache.shape[1] > 2
    assert torch.equal(with_cache, without_cache)
    assert len({tuple(row.tolist()) for row in with_cache}) > 1, "degenerate model: every sentence decodes the same"


def test_sampling_is_reproducible_under_a_seed_and_uses_the_cache():
    model = model_for()
    source, mask = random_batch(2, 5, 40)
    torch.manual_seed(1)
    first = model.generate(source, attention_mask=mask, do_sample=True, top_k=10, max_new_tokens=8)
    torch.manual_seed(1)
    second = model.generate(source, attention_mask=mask, do_sample=True, top_k=10, max_new_tokens=8, use_cache=False)
    assert torch.equal(first, second)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_padded_batch_translates_like_each_sentence_alone(num_beams):
    model = model_for()
    lengths = [8, 3, 5]
    source, mask = random_batch(3, 8, 40, lengths)
    kwargs = dict(num_beams=num_beams, do_sample=False, max_new_tokens=9, min_new_tokens=9, paper_decoding=False)
    batched = model.generate(source, attention_mask=mask, **kwargs)
    target, _ = random_batch(3, 6, 40)
    with torch.no_grad():
        batched_logits = model(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
    for row, n in enumerate(lengths):
        alone = model.generate(source[row : row + 1, :n], **kwargs)
        assert torch.equal(batched[row], alone[0])
        with torch.no_grad():
            alone_logits = model(input_ids=source[row : row + 1, :n], decoder_input_ids=target[row : row + 1]).logits
        torch.testing.assert_close(
            batched_logits[row], alone_logits[0], atol=1e-5, rtol=1e-5
        )  # float32 noise of other shapes


def test_decoder_padding_mask_leaves_real_tokens_unchanged():
    model = model_for()
    source, _ = random_batch(2, 6, 40)
    target, target_mask = random_batch(2, 7, 40, [7, 4])
    with torch.no_grad():
        masked = model(input_ids=source, decoder_input_ids=target, decoder_attention_mask=target_mask).logits
        alone = model(input_ids=source[1:], decoder_input_ids=target[1:, :4]).logits
    torch.testing.assert_close(masked[1, :4], alone[0], atol=1e-5, rtol=0)


def attention_implementations():
    implementations = ["eager", "sdpa"]
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401

        implementations.append("flex_attention")
    except ImportError:
        pass
    return implementations


def reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """§3.2.1 written out, independently of every kernel the model can use: softmax(Q K^T / sqrt(d_k)) V per
    batch row and head, d_k from the tensors; a boolean mask (True: attend) or an additive one."""
    scores = torch.einsum("bhtd,bhsd->bhts", query, key) / math.sqrt(query.shape[-1])
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    elif attention_mask is not None:
        scores = scores + attention_mask
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("bhts,bhsd->bthd", weights, value), weights


@pytest.mark.parametrize("attn_implementation", attention_implementations())
def test_attention_implementations_agree_with_an_independent_reference(attn_implementation, monkeypatch):
    """Every kernel the model can be configured with (eager included) against `reference_attention` in place of
    the model's eager kernel, in float64 (the kernels sum in other orders; what differs is then the math)."""
    import aayn.model.modeling_aayn as modeling

    if attn_implementation == "flex_attention":
        # transformers always runs flex attention through torch.compile, whose C++ code generation fails for these
        # kernels on torch 2.13 CPU; the uncompiled flex_attention checks the same thing here: our BlockMask.
        import transformers.integrations.flex_attention as flex
        from torch.nn.attention.flex_attention import flex_attention

        uncompiled = lambda query, key, value, training=False, **kwargs: flex_attention(query, key, value, **kwargs)
        monkeypatch.setattr(flex, "compile_friendly_flex_attention", uncompiled)
    model = model_for().double()
    source, mask = random_batch(3, 9, 40, [9, 4, 6])
    target, target_mask = random_batch(3, 6, 40, [6, 6, 3])
    inputs = dict(input_ids=source, attention_mask=mask, decoder_input_ids=target, decoder_attention_mask=target_mask)
    calls = []
    with torch.no_grad(), monkeypatch.context() as patch:
        model.config._attn_implementation = "eager"
        patch.setattr(
            modeling, "eager_attention_forward", lambda *a, **k: calls.append(1) or reference_attention(*a, **k)
        )
        expected = model(**inputs).logits
    layers = model.config.encoder_layers + 2 * model.config.decoder_layers
    assert len(calls) == layers  # every attention of the expected logits is the reference's
    model.config._attn_implementation = attn_implementation
    with torch.no_grad():
        actual = model(**inputs).logits
    torch.testing.assert_close(actual[0], expected[0], atol=1e-10, rtol=0)
    torch.testing.assert_close(actual[1], expected[1], atol=1e-10, rtol=0)
    torch.testing.assert_close(actual[2, :3], expected[2, :3], atol=1e-10, rtol=0)


def test_output_attentions_returns_weights_that_respect_the_masks():
    model = model_for()
    source, mask = random_batch(2, 6, 40, [6, 3])
    target, _ = random_batch(2, 5, 40)
    with torch.no_grad():
        out = model(
            input_ids=source,
            attention_mask=mask,
            decoder_input_ids=target,
            output_attentions=True,
            output_hidden_states=True,
        )
    layers, heads = model.config.decoder_layers, model.config.decoder_attention_heads
    assert len(out.encoder_attentions) == len(out.decoder_attentions) == len(out.cross_attentions) == layers
    assert out.cross_attentions[0].shape == (2, heads, 5, 6)
    assert len(out.encoder_hidden_states) == len(out.decoder_hidden_states) == layers + 1
    for weights in out.encoder_attentions + out.cross_attentions:
        assert weights[1, :, :, 3:].abs().max() == 0  # padding gets no attention
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    for weights in out.decoder_attentions:
        assert torch.equal(weights[0, 0].triu(1), torch.zeros(5, 5))  # no attention to the future (§3.2.3)


def test_weights_and_states_under_sdpa_are_the_eager_models_with_no_warning(recwarn):
    """Recorded by transformers' mechanism on either line: asking for attentions with SDPA configured (the default)
    takes the eager path for that call, silently; every recorded tensor equals an eager model's, and the states of
    pre-norm stacks begin with the embeddings and end with the final LayerNorm's output, the last hidden state."""
    model = model_for(norm_first=True).double()
    source, mask = random_batch(2, 6, 40, [6, 3])
    target, _ = random_batch(2, 5, 40)
    inputs = dict(input_ids=source, attention_mask=mask, decoder_input_ids=target)
    outputs = {}
    for implementation in ("sdpa", "eager"):
        model.config._attn_implementation = implementation
        with torch.no_grad():
            outputs[implementation] = model.model(**inputs, output_attentions=True, output_hidden_states=True)
    assert not [w for w in recwarn if "output_attentions" in str(w.message)]
    sdpa, eager = outputs["sdpa"], outputs["eager"]
    for field in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        assert len(sdpa[field]) == 2
        for got, expected in zip(sdpa[field], eager[field]):
            torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    assert torch.equal(sdpa.decoder_hidden_states[-1], sdpa.last_hidden_state)
    assert torch.equal(sdpa.encoder_hidden_states[-1], sdpa.encoder_last_hidden_state)
    with torch.no_grad():  # the first is the embedded source, entering the first layer
        torch.testing.assert_close(sdpa.encoder_hidden_states[0], model.model.encoder.embed(source, None))


@pytest.mark.parametrize("paper_decoding", [True, False])
def test_decoding_steps_multiply_by_a_transposed_copy_of_the_output_layer_with_the_same_logits(paper_decoding):
    """On CPU, `generate` multiplies small decoding steps by a (d_model, vocab) copy of the output matrix (a faster
    layout for torch's kernels): the logits are the output layer's, and the copy is gone after the call."""
    model = AaynForConditionalGeneration(tiny_config(vocab_size=300)).eval()
    source, mask = random_batch(3, 7, 300, [7, 4, 6])
    original, steps = model.output_logits, []

    def checked(hidden_states):
        logits = original(hidden_states)
        holder = model._decoding_matrix
        if holder is not None and holder[0] is not None:
            assert holder[0].shape == (32, 300) and holder[0].is_contiguous()
            torch.testing.assert_close(logits, model.lm_head(hidden_states), atol=1e-5, rtol=1e-5)
            steps.append(hidden_states.shape[:-1].numel())
        return logits

    model.output_logits = checked
    tokens = model.generate(source, attention_mask=mask, num_beams=2, max_new_tokens=6, paper_decoding=paper_decoding)
    assert steps and max(steps) <= 6 and model._decoding_matrix is None
    assert tokens.shape[0] == 3


def test_inputs_embeds_are_an_alternative_to_ids():
    model = AaynForConditionalGeneration(tiny_config()).eval()
    source, _ = random_batch(2, 4, 40)
    with torch.no_grad():
        expected = model(input_ids=source, decoder_input_ids=source).logits
        embeddings = model.get_input_embeddings()(source)
        actual = model(inputs_embeds=embeddings, decoder_inputs_embeds=embeddings).logits
    torch.testing.assert_close(actual, expected)
