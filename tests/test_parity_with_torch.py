"""Parity with an independent implementation: torch.nn.Transformer{Encoder,Decoder}{Layer,} with copied weights."""

import math

import pytest
import torch
from tiny_models import random_batch, tiny_config
from torch import nn

from aayn import AaynForConditionalGeneration
from aayn.model.modeling_aayn import AaynDecoderLayer, AaynEncoderLayer, sinusoidal_positions
from aayn.model.ops_aayn import attention_mask_for

ATOL = 1e-5


def copy_encoder_layer(reference: nn.TransformerEncoderLayer, layer: AaynEncoderLayer) -> None:
    with torch.no_grad():
        layer.self_attn.qkv_proj.weight.copy_(reference.self_attn.in_proj_weight)
        layer.self_attn.qkv_proj.bias.copy_(reference.self_attn.in_proj_bias)
        layer.self_attn.out_proj.load_state_dict(reference.self_attn.out_proj.state_dict())
        layer.feed_forward.fc1.load_state_dict(reference.linear1.state_dict())
        layer.feed_forward.fc2.load_state_dict(reference.linear2.state_dict())
        layer.self_attn_norm.load_state_dict(reference.norm1.state_dict())
        layer.feed_forward_norm.load_state_dict(reference.norm2.state_dict())


def copy_decoder_layer(reference: nn.TransformerDecoderLayer, layer: AaynDecoderLayer) -> None:
    d_model = layer.self_attn.out_proj.in_features
    with torch.no_grad():
        layer.self_attn.qkv_proj.weight.copy_(reference.self_attn.in_proj_weight)
        layer.self_attn.qkv_proj.bias.copy_(reference.self_attn.in_proj_bias)
        layer.self_attn.out_proj.load_state_dict(reference.self_attn.out_proj.state_dict())
        cross = reference.multihead_attn
        layer.encoder_attn.q_proj.weight.copy_(cross.in_proj_weight[:d_model])
        layer.encoder_attn.q_proj.bias.copy_(cross.in_proj_bias[:d_model])
        layer.encoder_attn.kv_proj.weight.copy_(cross.in_proj_weight[d_model:])
        layer.encoder_attn.kv_proj.bias.copy_(cross.in_proj_bias[d_model:])
        layer.encoder_attn.out_proj.load_state_dict(cross.out_proj.state_dict())
        layer.feed_forward.fc1.load_state_dict(reference.linear1.state_dict())
        layer.feed_forward.fc2.load_state_dict(reference.linear2.state_dict())
        layer.self_attn_norm.load_state_dict(reference.norm1.state_dict())
        layer.encoder_attn_norm.load_state_dict(reference.norm2.state_dict())
        layer.feed_forward_norm.load_state_dict(reference.norm3.state_dict())


def torch_layers(config):
    common = dict(
        d_model=config.d_model,
        dropout=0.0,
        activation="relu",
        layer_norm_eps=config.layer_norm_eps,
        batch_first=True,
        norm_first=config.norm_first,
    )
    encoder_layer = nn.TransformerEncoderLayer(
        nhead=config.encoder_attention_heads, dim_feedforward=config.encoder_ffn_dim, **common
    )
    decoder_layer = nn.TransformerDecoderLayer(
        nhead=config.decoder_attention_heads, dim_feedforward=config.decoder_ffn_dim, **common
    )
    return encoder_layer, decoder_layer


def reference_positions(length: int, d_model: int) -> torch.Tensor:
    """§3.5 written out element by element."""
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    for pos in range(length):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return pe.float()


def test_sinusoidal_positions_match_the_paper_formula():
    assert torch.allclose(sinusoidal_positions(0, 50, 16, torch.device("cpu")), reference_positions(50, 16), atol=1e-5)
    assert torch.allclose(
        sinusoidal_positions(7, 3, 16, torch.device("cpu")), reference_positions(10, 16)[7:], atol=1e-5
    )


def fairseq_positions(length: int, d_model: int, padding_idx: int) -> torch.Tensor:
    """fairseq's `SinusoidalPositionalEmbedding.get_embedding` (tensor2tensor's timing signal), written out: for
    i < d/2, sin(pos * 10000^(-i/(d/2 - 1))) in column i and the cosine in column d/2 + i, for the positions
    padding_idx + 1, padding_idx + 2, ... that fairseq gives a sequence's tokens."""
    half = d_model // 2
    table = torch.zeros(length, d_model, dtype=torch.float64)
    for row in range(length):
        pos = padding_idx + 1 + row
        for i in range(half):
            table[row, i] = math.sin(pos * math.exp(-math.log(10000) * i / (half - 1)))
            table[row, half + i] = math.cos(pos * math.exp(-math.log(10000) * i / (half - 1)))
    return table.float()


def test_tensor2tensor_positions_counted_from_an_offset_match_fairseq_s():
    config = tiny_config(position_encoding="tensor2tensor", position_offset=2, dropout=0.0, scale_embedding=False)
    embed = AaynForConditionalGeneration(config).model.encoder.embed
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    with torch.no_grad():
        positions = embed(ids, None) - embed.embed_tokens(ids)  # what the embedding layer adds
        step = embed(ids[:, 3:4], None, past_length=3) - embed.embed_tokens(ids[:, 3:4])  # a decoding step
    torch.testing.assert_close(positions[0], fairseq_positions(7, 32, padding_idx=1), atol=1e-5, rtol=0)
    torch.testing.assert_close(step[0], positions[0, 3:4], atol=1e-6, rtol=0)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_single_layers_match_torch(norm_first, attn_implementation):
    config = tiny_config(norm_first=norm_first)
    config._attn_implementation = attn_implementation
    model = AaynForConditionalGeneration(config).eval()
    encoder_reference, decoder_reference = (layer.eval() for layer in torch_layers(config))
    encoder_layer, decoder_layer = model.model.encoder.layers[0], model.model.decoder.layers[0]
    copy_encoder_layer(encoder_reference, encoder_layer)
    copy_decoder_layer(decoder_reference, decoder_layer)

    source_lengths, target_lengths = [9, 5, 2], [7, 7, 3]
    source = torch.randn(3, 9, config.d_model)
    target = torch.randn(3, 7, config.d_model)
    _, source_mask = random_batch(3, 9, config.vocab_size, source_lengths)
    _, target_mask = random_batch(3, 7, config.vocab_size, target_lengths)
    causal = torch.ones(7, 7, dtype=torch.bool).triu(1)  # True = not allowed to attend
    impl = model.model.encoder.config._attn_implementation

    with torch.no_grad():
        expected_memory = encoder_reference(source, src_key_padding_mask=source_mask == 0)
        memory = encoder_layer(source, attention_mask_for(impl, source_mask, 9, 9, False, source))
        expected = decoder_reference(
            target,
            expected_memory,
            tgt_mask=causal,
            tgt_is_causal=True,
            tgt_key_padding_mask=target_mask == 0,
            memory_key_padding_mask=source_mask == 0,
        )
        output = decoder_layer(
            target,
            expected_memory,
            attention_mask_for(impl, target_mask, 7, 7, True, target),
            attention_mask_for(impl, source_mask, 7, 9, False, target),
        )
    for row in range(3):
        torch.testing.assert_close(
            memory[row, : source_lengths[row]], expected_memory[row, : source_lengths[row]], atol=ATOL, rtol=0
        )
        torch.testing.assert_close(
            output[row, : target_lengths[row]], expected[row, : target_lengths[row]], atol=ATOL, rtol=0
        )


@pytest.mark.parametrize("norm_first", [False, True])
def test_whole_stacks_match_torch(norm_first):
    """Embedding (scaled, §3.4) + positions (§3.5) + N layers (+ a final norm for pre-norm), against torch."""
    config = tiny_config(norm_first=norm_first, encoder_layers=3, decoder_layers=3)
    model = AaynForConditionalGeneration(config).eval()
    encoder_layer, decoder_layer = torch_layers(config)
    final_norm = lambda: nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if norm_first else None
    encoder = nn.TransformerEncoder(encoder_layer, 3, norm=final_norm(), enable_nested_tensor=False).eval()
    decoder = nn.TransformerDecoder(decoder_layer, 3, norm=final_norm()).eval()
    for reference, ours in zip(encoder.layers, model.model.encoder.layers):
        copy_encoder_layer(reference, ours)
    for reference, ours in zip(decoder.layers, model.model.decoder.layers):
        copy_decoder_layer(reference, ours)
    if norm_first:
        with torch.no_grad():
            for reference_norm, ours in ((encoder.norm, model.model.encoder), (decoder.norm, model.model.decoder)):
                reference_norm.weight.normal_()
                reference_norm.bias.normal_()
                ours.layer_norm.load_state_dict(reference_norm.state_dict())

    source_lengths = [10, 6, 3]
    source_ids, source_mask = random_batch(3, 10, config.vocab_size, source_lengths)
    target_ids, _ = random_batch(3, 8, config.vocab_size)
    embedding = model.model.shared.weight
    embed = lambda ids: embedding[ids] * math.sqrt(config.d_model) + reference_positions(ids.shape[1], config.d_model)
    with torch.no_grad():
        expected_memory = encoder(embed(source_ids), src_key_padding_mask=source_mask == 0)
        expected = decoder(
            embed(target_ids),
            expected_memory,
            tgt_mask=torch.ones(8, 8, dtype=torch.bool).triu(1),
            tgt_is_causal=True,
            memory_key_padding_mask=source_mask == 0,
        )
        outputs = model.model(input_ids=source_ids, attention_mask=source_mask, decoder_input_ids=target_ids)
        logits = model(input_ids=source_ids, attention_mask=source_mask, decoder_input_ids=target_ids).logits
    for row, n in enumerate(source_lengths):
        torch.testing.assert_close(
            outputs.encoder_last_hidden_state[row, :n], expected_memory[row, :n], atol=ATOL, rtol=0
        )
    torch.testing.assert_close(outputs.last_hidden_state, expected, atol=ATOL, rtol=0)
    # §3.4: the pre-softmax projection is the embedding matrix
    torch.testing.assert_close(logits, expected @ embedding.T, atol=ATOL, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_attention_equals_the_masked_fill_formula_to_the_bit(dtype):
    """The eager kernel adds the mask as a bias instead of a masked_fill over every head's scores (faster on CPU);
    the attention weights, output and gradients must stay those of softmax(masked_fill(Q K^T * scale)) V exactly,
    in bfloat16 too, so that training runs do not change with the kernel."""
    from types import SimpleNamespace

    from aayn.model.ops_aayn import eager_attention_forward

    torch.manual_seed(0)
    batch, heads, queries, keys, head_dim = 3, 4, 7, 9, 8
    q, k, v = (torch.randn(batch, heads, n, head_dim, dtype=dtype) for n in (queries, keys, keys))
    mask = torch.ones(batch, 1, queries, keys, dtype=torch.bool).tril(diagonal=keys - queries)
    mask[1, :, :, 6:] = False  # a padded sentence
    scale, grad = head_dim**-0.5, torch.randn(batch, queries, heads, head_dim, dtype=dtype)

    def reference(q, k, v):
        scores = torch.matmul(q, k.transpose(2, 3)) * scale
        weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(dtype).min), dim=-1)
        return torch.matmul(weights, v).transpose(1, 2).contiguous(), weights

    results = []
    for attend in (
        reference,
        lambda q, k, v: eager_attention_forward(SimpleNamespace(training=True), q, k, v, mask, scale),
    ):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        output, weights = attend(*inputs)
        output.backward(grad)
        results.append([output, weights, *(t.grad for t in inputs)])
    for ours, theirs in zip(*results):
        assert torch.equal(ours, theirs)
