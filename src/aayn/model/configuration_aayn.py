"""Configuration of the "Attention Is All You Need" encoder-decoder (Vaswani et al., 2017).

This file travels with saved checkpoints as Hub remote code: it imports only transformers and policy_aayn.
"""

from transformers import PretrainedConfig  # the 4.57 name; 5.x keeps it as an alias of PreTrainedConfig
from transformers.activations import ACT2FN

from .policy_aayn import (
    BASE_D_MODEL,
    BASE_DROPOUT,
    BASE_FFN_DIM,
    BASE_HEADS,
    BASE_LAYERS,
    BASE_VOCAB_SIZE,
    MAX_POSITIONS,
)

TRANSLATION_PIPELINE = {
    "impl": "pipeline_aayn.AaynTranslationPipeline",
    "pt": ["AutoModelForSeq2SeqLM"],
    "tf": [],
    "type": "text",
}


POSITION_ENCODINGS = ("paper", "tensor2tensor", "marian")  # the layouts of §3.5's sinusoids (`position_encoding`)


class AaynConfig(PretrainedConfig):
    r"""Hyperparameters of the AAYN Transformer. The defaults are the paper's base model (Table 3, row "base").

    The big model is `AaynConfig(d_model=1024, encoder_ffn_dim=4096, decoder_ffn_dim=4096,
    encoder_attention_heads=16, decoder_attention_heads=16, dropout=0.3)`.

    Args:
        vocab_size: size of the shared source-target vocabulary (§5.1: about 37000 BPE tokens for EN-DE), or of
            the source vocabulary when `share_encoder_decoder_embeddings=False`.
        decoder_vocab_size: size of the target vocabulary; defaults to `vocab_size`. Only differs from it when
            source and target vocabularies are separate.
        d_model: width of every sub-layer output and embedding (§3.1).
        encoder_layers / decoder_layers: N, the number of identical layers in each stack (§3.1).
        encoder_attention_heads / decoder_attention_heads: h, the number of attention heads (§3.2.2).
        encoder_ffn_dim / decoder_ffn_dim: d_ff, the inner width of the position-wise feed-forward network (§3.3).
        dropout: P_drop, applied to each sub-layer output before the residual addition and to the sums of
            embeddings and positional encodings (§5.4).
        attention_dropout: dropout on the attention probabilities (not in the paper; 0 keeps it faithful).
        activation_dropout: dropout after the feed-forward activation (not in the paper; 0 keeps it faithful).
        activation_function: the feed-forward non-linearity, "relu" in the paper (§3.3).
        norm_first: False is the paper's post-norm `LayerNorm(x + Sublayer(x))` (§3.1); True is the pre-norm
            variant `x + Sublayer(LayerNorm(x))` with a final LayerNorm on each stack.
        layer_norm_eps: epsilon of every LayerNorm (torch's default).
        init_std: None (default) initializes as the paper's codebases do (Xavier-uniform projections, embeddings
            from N(0, d_model^-0.5)); a number draws every projection and embedding from N(0, init_std) instead,
            as transformers' Marian and BART do (0.02). The paper names no initialization; small models trained
            briefly learn faster with 0.02 (the demo recipe).
        label_smoothing: epsilon_ls of §5.4, the label smoothing of the loss `forward` returns with `labels`
            (the paper's 0.1; `aayn train` sets it from `label_smoothing_factor`). 0 is plain cross-entropy.
        scale_embedding: multiply embeddings by sqrt(d_model) (§3.4).
        share_encoder_decoder_embeddings: one embedding matrix for source and target tokens (§3.4); needs
            `decoder_vocab_size == vocab_size`. Turn off for separate source and target vocabularies.
        tie_word_embeddings: the pre-softmax projection reuses the decoder's embedding matrix (§3.4).
        max_position_embeddings: the longest sequence the model is meant for. Positional encodings are
            sinusoids computed on the fly (§3.5), so longer inputs still work; a warning says when they occur.
        position_encoding: the layout of §3.5's sinusoids: "paper" (the formula: sin and cos interleaved,
            frequencies 10000^(-2i/d_model)), "tensor2tensor" (the paper authors' code, also fairseq's and
            marian-nmt's: all sines then all cosines, frequencies 10000^(-i/(d_model/2 - 1))) or "marian"
            (transformers' MarianMTModel: all sines then all cosines, the paper's frequencies), which imported
            models use.
        output_bias: a bias on the output layer (the pre-softmax projection), as Marian's `final_logits_bias`; the
            paper has none (False).
        position_offset: the position number of a sequence's first token (fairseq counts from its padding id
            + 1; 0 in the paper).
        pad_token_id / bos_token_id / eos_token_id / decoder_start_token_id: special token ids; the decoder
            starts from `decoder_start_token_id` (bos by default).
        custom_pipelines: the `pipeline("translation")` implementation that travels with saved checkpoints.
        paper_decoding: `generate()` decodes as §6.1 (GNMT length penalty, source length + 50); False gives
            transformers' own beam search. `generate(..., paper_decoding=False)` switches one call.
    """

    model_type = "aayn"
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    def __init__(
        self,
        vocab_size: int = BASE_VOCAB_SIZE,
        decoder_vocab_size: int | None = None,
        d_model: int = BASE_D_MODEL,
        encoder_layers: int = BASE_LAYERS,
        decoder_layers: int = BASE_LAYERS,
        encoder_attention_heads: int = BASE_HEADS,
        decoder_attention_heads: int = BASE_HEADS,
        encoder_ffn_dim: int = BASE_FFN_DIM,
        decoder_ffn_dim: int = BASE_FFN_DIM,
        dropout: float = BASE_DROPOUT,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation_function: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        init_std: float | None = None,
        label_smoothing: float = 0.0,
        scale_embedding: bool = True,
        share_encoder_decoder_embeddings: bool = True,
        tie_word_embeddings: bool = True,
        max_position_embeddings: int = MAX_POSITIONS,
        position_encoding: str = "paper",
        position_offset: int = 0,
        output_bias: bool = False,
        use_cache: bool = True,
        pad_token_id: int = 0,
        bos_token_id: int = 1,
        eos_token_id: int = 2,
        decoder_start_token_id: int = 1,
        is_encoder_decoder: bool = True,
        custom_pipelines: dict | None = None,
        paper_decoding: bool = True,
        **kwargs,
    ):
        # pipeline("translation", trust_remote_code=True) finds our pipeline (saved beside the model code) here,
        # before transformers 5.x rejects the task it removed
        self.custom_pipelines = custom_pipelines or {"translation": TRANSLATION_PIPELINE}
        self.paper_decoding = paper_decoding
        self.vocab_size = vocab_size
        self.decoder_vocab_size = vocab_size if decoder_vocab_size is None else decoder_vocab_size
        self.d_model = d_model
        self.encoder_layers, self.decoder_layers = encoder_layers, decoder_layers
        self.encoder_attention_heads = encoder_attention_heads
        self.decoder_attention_heads = decoder_attention_heads
        self.encoder_ffn_dim = encoder_ffn_dim
        self.decoder_ffn_dim = decoder_ffn_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.activation_function = activation_function
        self.norm_first = norm_first
        self.layer_norm_eps = layer_norm_eps
        self.init_std = init_std
        self.label_smoothing = label_smoothing
        self.scale_embedding = scale_embedding
        self.share_encoder_decoder_embeddings = share_encoder_decoder_embeddings
        self.max_position_embeddings = max_position_embeddings
        self.position_encoding = position_encoding
        self.position_offset = position_offset
        self.output_bias = output_bias
        self.use_cache = use_cache
        self.decoder_start_token_id = decoder_start_token_id
        self._validate()
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            decoder_start_token_id=decoder_start_token_id,
            is_encoder_decoder=is_encoder_decoder,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        self._validate_token_ids(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            decoder_start_token_id=decoder_start_token_id,
        )

    def _validate(self) -> None:
        """Reject impossible hyperparameters here, where they enter, rather than deep inside a forward pass."""
        for name in (
            "vocab_size", "decoder_vocab_size", "d_model", "encoder_layers", "decoder_layers",
            "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
            "max_position_embeddings",
        ):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"AaynConfig.{name} must be a positive integer, got {value!r}")
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, name)
            if self.d_model % heads:
                raise ValueError(
                    f"AaynConfig.d_model={self.d_model} must be divisible by {name}={heads}: "
                    f"each of the {heads} heads gets d_model / {name} dimensions (§3.2.2)"
                )
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"AaynConfig.{name} must be a probability in [0, 1), got {value!r}")
        if not isinstance(self.layer_norm_eps, (int, float)) or not self.layer_norm_eps > 0:
            raise ValueError(f"AaynConfig.layer_norm_eps must be a positive number, got {self.layer_norm_eps!r}")
        if self.init_std is not None and (
            isinstance(self.init_std, bool) or not isinstance(self.init_std, (int, float)) or not self.init_std > 0
        ):
            raise ValueError(f"AaynConfig.init_std must be None or a positive number, got {self.init_std!r}")
        if self.activation_function not in ACT2FN:
            raise ValueError(
                f"AaynConfig.activation_function={self.activation_function!r} is unknown; "
                f"allowed: {', '.join(sorted(ACT2FN))}"
            )
        if self.position_encoding not in POSITION_ENCODINGS:
            raise ValueError(
                f"AaynConfig.position_encoding={self.position_encoding!r} is unknown; allowed: "
                f"{', '.join(POSITION_ENCODINGS)}"
            )
        offset = self.position_offset
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"AaynConfig.position_offset must be a non-negative integer, got {offset!r}")
        if self.share_encoder_decoder_embeddings and self.decoder_vocab_size != self.vocab_size:
            raise ValueError(
                f"AaynConfig.decoder_vocab_size={self.decoder_vocab_size} differs from vocab_size={self.vocab_size}, "
                "but share_encoder_decoder_embeddings=True needs one shared vocabulary; "
                "set share_encoder_decoder_embeddings=False for separate source and target vocabularies"
            )

    def _validate_token_ids(self, **token_ids: int | None) -> None:
        for name, value in token_ids.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.decoder_vocab_size:
                raise ValueError(
                    f"AaynConfig.{name} must be a token id in [0, {self.decoder_vocab_size}) "
                    f"(the target vocabulary), got {value!r}"
                )
        if self.pad_token_id is not None and self.pad_token_id >= self.vocab_size:
            raise ValueError(
                f"AaynConfig.pad_token_id must be a token id in [0, {self.vocab_size}) "
                f"(the source vocabulary), got {self.pad_token_id!r}"
            )


__all__ = ["AaynConfig"]
