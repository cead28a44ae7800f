import pytest
import torch

from aayn import AaynConfig, AaynForConditionalGeneration

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def test_defaults_are_the_paper_base_model():
    config = AaynConfig()
    assert (config.vocab_size, config.d_model, config.encoder_layers, config.decoder_layers) == (37000, 512, 6, 6)
    assert (config.encoder_attention_heads, config.encoder_ffn_dim, config.dropout) == (8, 2048, 0.1)
    assert config.activation_function == "relu" and not config.norm_first and config.scale_embedding
    assert config.tie_word_embeddings and config.share_encoder_decoder_embeddings and config.is_encoder_decoder
    assert config.hidden_size == 512 and config.num_attention_heads == 8  # transformers' generic names


def test_base_model_has_the_papers_parameter_count():
    model = AaynForConditionalGeneration(AaynConfig())
    n = sum(p.numel() for p in model.parameters())  # tied matrices count once
    assert 60e6 <= n <= 66e6, n  # Table 3: 65M


def test_big_model_has_the_papers_parameter_count():
    """Table 3's big model (d_model 1024, d_ff 4096, 16 heads of d_k 64): 213M parameters. Built on the meta device
    (no memory), as `aayn train` counts a model before allocating it."""
    from aayn.checks import parameter_count

    config = AaynConfig(d_model=1024, encoder_ffn_dim=4096, decoder_ffn_dim=4096, encoder_attention_heads=16,
                        decoder_attention_heads=16, dropout=0.3)  # fmt: skip
    with torch.device("meta"):
        model = AaynForConditionalGeneration(config)
    assert model.model.encoder.layers[0].self_attn.head_dim == 64
    n = parameter_count(config)
    assert 208e6 <= n <= 216e6, n  # Table 3: 213M


def test_round_trip_through_json(tmp_path):
    config = AaynConfig(
        vocab_size=100, d_model=64, encoder_attention_heads=4, decoder_attention_heads=4, norm_first=True
    )
    config.save_pretrained(tmp_path)
    loaded = AaynConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == config.to_dict()
    assert loaded.norm_first and loaded.d_model == 64 and loaded.model_type == "aayn"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("d_model", 500, "d_model=500 must be divisible by encoder_attention_heads=8"),
        ("decoder_attention_heads", 3, "divisible by decoder_attention_heads=3"),
        ("vocab_size", 0, "vocab_size must be a positive integer, got 0"),
        ("encoder_layers", -1, "encoder_layers must be a positive integer, got -1"),
        ("decoder_ffn_dim", 2.5, "decoder_ffn_dim must be a positive integer, got 2.5"),
        ("max_position_embeddings", 0, "max_position_embeddings must be a positive integer"),
        ("dropout", 1.0, "dropout must be a probability in [0, 1), got 1.0"),
        ("attention_dropout", -0.1, "attention_dropout must be a probability in [0, 1), got -0.1"),
        ("activation_dropout", "0.1", "activation_dropout must be a probability"),
        ("layer_norm_eps", 0, "layer_norm_eps must be a positive number"),
        ("activation_function", "swishy", "activation_function='swishy' is unknown; allowed:"),
        ("pad_token_id", 37000, "pad_token_id must be a token id in [0, 37000)"),
        ("eos_token_id", -1, "eos_token_id must be a token id in [0, 37000)"),
        ("bos_token_id", 99999, "bos_token_id must be a token id"),
        ("decoder_start_token_id", 40000, "decoder_start_token_id must be a token id"),
        ("decoder_vocab_size", 100, "decoder_vocab_size=100 differs from vocab_size=37000"),
        ("position_encoding", "fairseq", "position_encoding='fairseq' is unknown; allowed: paper, tensor2tensor"),
        ("position_offset", -1, "position_offset must be a non-negative integer, got -1"),
        ("position_offset", 1.5, "position_offset must be a non-negative integer, got 1.5"),
    ],
)
def test_invalid_values_name_the_field_the_value_and_what_is_allowed(field, value, message):
    with pytest.raises(ValueError) as error:
        AaynConfig(**{field: value})
    assert message in str(error.value)


def test_separate_vocabularies_check_ids_against_the_right_one():
    config = AaynConfig(vocab_size=100, decoder_vocab_size=50, share_encoder_decoder_embeddings=False)
    assert config.decoder_vocab_size == 50
    with pytest.raises(ValueError, match="pad_token_id must be a token id in \\[0, 30\\) \\(the source vocabulary\\)"):
        AaynConfig(vocab_size=30, decoder_vocab_size=50, share_encoder_decoder_embeddings=False, pad_token_id=40)
