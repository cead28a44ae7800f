"""The "Attention Is All You Need" encoder-decoder Transformer (Vaswani et al., 2017) as a transformers model.

Read top to bottom, each piece names the paper section it implements; the kernels are in `ops_aayn.py`, the §6.1
search in `search_aayn.py` (the model's side of it in `decoding_aayn.py`, `generate()`'s routing in
`generation_aayn.py`). This file travels with saved checkpoints as Hub remote code: it imports only torch,
transformers and those files, each of them directly (transformers 4.57 copies a local folder's remote code one
import deep).
"""

import math

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging

from .cache_aayn import NO_CACHE, DecoderCache, decoder_cache
from .compat_aayn import (
    CACHE_FIELD,
    OutputRecorder,
    TiedParameters,
    capture_outputs,
    either_cache_name,
    refuse_unknown,
    tied_weights_keys,
)
from .configuration_aayn import AaynConfig
from .constraints_aayn import ConstrainedSearch  # noqa: F401  (4.57 copies a remote module's direct imports only)
from .decoding_aayn import AaynDecodingMixin
from .generation_aayn import generate as paper_generate
from .glossary_aayn import Glossary  # noqa: F401  (the pipeline's, copied with the model's code)
from .hub_aayn import AaynCardUpload, AaynOwnCodeSave
from .ops_aayn import (
    AaynDropout,
    attention_implementation,
    attention_mask_for,
    eager_attention_forward,
    fused_label_smoothed_loss,
    label_smoothed_loss,
    plain_linear,
    sinusoidal_positions,
)
from .pipeline_aayn import AaynTranslationPipeline  # noqa: F401  (relative imports travel with the remote code)
from .policy_aayn import PAPER_LENGTH_PENALTY, PAPER_NUM_BEAMS, paper_length_limit  # noqa: F401
from .resize_aayn import AaynResizing
from .search_aayn import paper_search  # noqa: F401

logger = logging.get_logger(__name__)


def tied_parameters(config: AaynConfig, lm_head: bool) -> dict[str, str]:
    """§3.4: which parameters are one matrix, as {tied: source}, for `AaynForConditionalGeneration`
    (`lm_head=True`) or the bare `AaynModel`."""
    prefix = "model." if lm_head else ""
    tied = {}
    if config.share_encoder_decoder_embeddings:
        for stack in ("encoder", "decoder"):
            tied[f"{prefix}{stack}.embed.embed_tokens.weight"] = f"{prefix}shared.weight"
    if lm_head and config.tie_word_embeddings:
        shared = config.share_encoder_decoder_embeddings
        tied["lm_head.weight"] = "model.shared.weight" if shared else "model.decoder.embed.embed_tokens.weight"
    return tied


def tie_target(source: nn.Embedding) -> nn.Embedding:
    """A stack's embedding whose matrix is `source`'s (§3.4): a module of its own, its weight tied to the source's
    as a parameter (by transformers' tying, `tied_parameters`), so that loading reports and initializes each name
    by itself. Marked `tied`: `_init_weights` leaves its matrix to the source's."""
    embedding = nn.Embedding(*source.weight.shape, source.padding_idx, _weight=source.weight)  # no draw of its own
    embedding.tied = True
    return embedding


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder sees the target shifted right by one, starting from the start token (§3.1)."""
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill_(shifted == -100, pad_token_id)


def fused_linear(d_model: int, count: int) -> nn.Linear:
    """`count` projections of width d_model in one matrix: one product instead of `count`."""
    linear = nn.Linear(d_model, count * d_model)
    linear.fused = count  # read by _init_weights: each projection is initialized as its own matrix
    return linear


class AaynAttention(nn.Module):
    """§3.2.2 Multi-Head Attention: h scaled dot-product attentions over learned projections, concatenated.

    Self-attention projects queries, keys and values with one fused matrix; encoder-decoder attention (§3.2.3)
    projects queries from the decoder and keys/values from the encoder output, the latter once per sentence:
    during generation they are computed at the first step and kept in the cache.
    """

    def __init__(self, config: AaynConfig, num_heads: int, layer_idx: int, *, causal: bool, cross: bool):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.layer_idx = layer_idx
        self.is_causal = causal  # read by transformers' SDPA and flash-attention functions
        self.is_cross_attention = cross
        d_model = config.d_model
        if cross:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = fused_linear(d_model, 2)
        else:
            self.qkv_proj = fused_linear(d_model, 3)
        self.out_proj = nn.Linear(d_model, d_model)

    def to_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> (B, nh, T, hs)"""
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        key_value_states: torch.Tensor | None = None,
        cache: DecoderCache = NO_CACHE,
        implementation: str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`cache`: where keys and values are kept (`cache_aayn.DecoderCache`), which may name the kernel of a
        search's step; `implementation`: the attention function the stack built its masks for (eager where weights
        are recorded), the configured one if not given. Returns the output and, from the eager path, the weights."""
        if self.is_cross_attention:
            query = self.to_heads(self.q_proj(hidden_states))  # (B, nh, T, hs)
            project = lambda: [self.to_heads(x) for x in self.kv_proj(key_value_states).chunk(2, -1)]
            key, value = cache.cross_attention(self.layer_idx, project)  # (B, nh, S, hs)
            cache.observe_cross(self, query, key, attention_mask)
        else:
            query, key, value = (self.to_heads(x) for x in self.qkv_proj(hidden_states).chunk(3, -1))  # (B, nh, T, hs)
            key, value = cache.self_attention(self.layer_idx, key, value)

        implementation = implementation or self.config._attn_implementation
        kernel = cache.attention_kernel(implementation)
        if kernel is not None:
            output, weights = kernel(self, query, key, value, attention_mask), None
        else:
            attend = eager_attention_forward if implementation == "eager" else ALL_ATTENTION_FUNCTIONS[implementation]
            dropout = self.dropout if self.training else 0.0
            output, weights = attend(self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling)
        return self.out_proj(output.reshape(*output.shape[:2], -1)), weights  # (B, T, d_model)


class AaynFeedForward(nn.Module):
    """§3.3 Position-wise Feed-Forward Network: FFN(x) = max(0, x W1 + b1) W2 + b2."""

    def __init__(self, config: AaynConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.activation = ACT2FN[config.activation_function]
        self.activation_dropout = AaynDropout(config.activation_dropout)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_dropout(self.activation(self.fc1(hidden_states))))


class AaynLayer(GradientCheckpointingLayer):
    """§3.1 + §5.4: "the output of each sub-layer is LayerNorm(x + Sublayer(x))", with dropout "applied to the
    output of each sub-layer, before it is added to the sub-layer input". With `config.norm_first` the pre-norm
    variant x + Dropout(Sublayer(LayerNorm(x))). Each sub-layer owns its LayerNorm (`*_norm`)."""

    def __init__(self, config: AaynConfig):
        super().__init__()
        self.norm_first = config.norm_first
        self.dropout = AaynDropout(config.dropout)

    def sublayer_input(self, hidden_states: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        return norm(hidden_states) if self.norm_first else hidden_states

    def add_and_norm(self, hidden_states: torch.Tensor, output: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        hidden_states = self.dropout.add_to(hidden_states, output)
        return hidden_states if self.norm_first else norm(hidden_states)


def layer_norm(config: AaynConfig) -> nn.LayerNorm:
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)


class AaynEncoderLayer(AaynLayer):
    """§3.1 Encoder layer: multi-head self-attention, then the feed-forward network."""

    def __init__(self, config: AaynConfig, layer_idx: int):
        super().__init__(config)
        self.self_attn = AaynAttention(config, config.encoder_attention_heads, layer_idx, causal=False, cross=False)
        self.self_attn_norm = layer_norm(config)
        self.feed_forward = AaynFeedForward(config, config.encoder_ffn_dim)
        self.feed_forward_norm = layer_norm(config)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, implementation: str | None = None
    ) -> torch.Tensor:
        x = self.sublayer_input(hidden_states, self.self_attn_norm)
        attended, _ = self.self_attn(x, attention_mask, implementation=implementation)
        hidden_states = self.add_and_norm(hidden_states, attended, self.self_attn_norm)
        x = self.sublayer_input(hidden_states, self.feed_forward_norm)
        return self.add_and_norm(hidden_states, self.feed_forward(x), self.feed_forward_norm)


class AaynDecoderLayer(AaynLayer):
    """§3.1 Decoder layer: masked self-attention, attention over the encoder output, then the feed-forward network."""

    def __init__(self, config: AaynConfig, layer_idx: int):
        super().__init__(config)
        heads = config.decoder_attention_heads
        self.self_attn = AaynAttention(config, heads, layer_idx, causal=True, cross=False)
        self.self_attn_norm = layer_norm(config)
        self.encoder_attn = AaynAttention(config, heads, layer_idx, causal=False, cross=True)
        self.encoder_attn_norm = layer_norm(config)
        self.feed_forward = AaynFeedForward(config, config.decoder_ffn_dim)
        self.feed_forward_norm = layer_norm(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: DecoderCache = NO_CACHE,
        implementation: str | None = None,
    ) -> torch.Tensor:
        """`encoder_hidden_states`: None where the cache holds the encoder's keys and values (a search step)."""
        x = self.sublayer_input(hidden_states, self.self_attn_norm)
        attended, _ = self.self_attn(x, attention_mask, None, cache, implementation)
        hidden_states = self.add_and_norm(hidden_states, attended, self.self_attn_norm)
        x = self.sublayer_input(hidden_states, self.encoder_attn_norm)
        attended, _ = self.encoder_attn(x, encoder_attention_mask, encoder_hidden_states, cache, implementation)
        hidden_states = self.add_and_norm(hidden_states, attended, self.encoder_attn_norm)
        x = self.sublayer_input(hidden_states, self.feed_forward_norm)
        return self.add_and_norm(hidden_states, self.feed_forward(x), self.feed_forward_norm)


class AaynEmbeddings(nn.Module):
    """§3.4 Embeddings (scaled by sqrt(d_model)) plus §3.5 positional encodings, then dropout (§5.4)."""

    def __init__(self, config: AaynConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.dropout = AaynDropout(config.dropout)
        self.d_model, self.layout, self.offset = config.d_model, config.position_encoding, config.position_offset
        self.max_positions = config.max_position_embeddings
        self.warned_of_length = False

    def forward(
        self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, past_length: int = 0
    ) -> torch.Tensor:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids and inputs_embeds")
        if inputs_embeds is None:
            try:  # no host read on the way: the embedding's own range check (CPU) is translated if it fails
                inputs_embeds = self.embed_tokens(input_ids)
            except IndexError:
                low, high = torch.stack(torch.aminmax(input_ids)).tolist()
                raise ValueError(
                    f"token ids must lie in [0, {self.embed_tokens.num_embeddings}) (the embedding's vocabulary), "
                    f"got values from {low} to {high}"
                ) from None
        length = inputs_embeds.shape[1]
        self.warn_of_length(past_length + length)
        encodings = self.encodings(length, inputs_embeds.device, past_length)
        return self.dropout(self.add_positions(inputs_embeds, encodings))

    def add_positions(self, inputs_embeds: torch.Tensor, encodings: torch.Tensor) -> torch.Tensor:
        """The scaled embeddings plus the positions' §3.5 encodings (before dropout)."""
        return inputs_embeds * self.scale + encodings.to(inputs_embeds.dtype)

    def encodings(self, length: int, device: torch.device, start: int = 0) -> torch.Tensor:
        """§3.5's encodings of a sequence's positions start .. start + length - 1 (a search reads its steps' from
        one table, `decoding_aayn`; the CTranslate2 export writes them as one)."""
        return sinusoidal_positions(self.offset + start, length, self.d_model, device, self.layout)

    def warn_of_length(self, positions: int) -> None:
        if positions > self.max_positions and not self.warned_of_length:
            self.warned_of_length = True  # once per model, not once per length (decoding steps lengthen one by one)
            logger.warning(
                f"A sequence of {positions} positions exceeds max_position_embeddings={self.max_positions}; the "
                "sinusoids extend to it (§3.5), but the model was not trained on such lengths."
            )


class AaynPreTrainedModel(TiedParameters, AaynOwnCodeSave, AaynCardUpload, PreTrainedModel):
    config_class = AaynConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["AaynEncoderLayer", "AaynDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        """`set_attn_implementation` works: every attention call reads `config._attn_implementation` (transformers
        looks for its own models' lines in the modeling file's text, and would refuse ours)."""
        return True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Initialization of the paper's codebases (tensor2tensor, fairseq) and the Annotated Transformer:
        Xavier-uniform projections (Q, K and V each its own matrix) with zero biases, embeddings from
        N(0, d_model^-0.5), LayerNorm at identity.
        With `config.init_std`, projections and embeddings are drawn from N(0, init_std) instead."""
        std = self.config.init_std
        embedding_std = self.config.d_model**-0.5 if std is None else std
        if isinstance(module, nn.Linear):
            if std is not None:
                nn.init.normal_(module.weight, mean=0.0, std=std)
            elif module is getattr(self, "lm_head", None):  # an output embedding: initialized like the input ones
                nn.init.normal_(module.weight, mean=0.0, std=embedding_std)
            elif getattr(module, "fused", 1) == 1:
                nn.init.xavier_uniform_(module.weight)
            # transformers 5.x marks weights loaded from a checkpoint; a slice of one would lose the mark
            elif not getattr(module.weight, "_is_hf_initialized", False):
                for block in module.weight.chunk(module.fused):  # Q, K, V each as its own matrix, as tensor2tensor
                    nn.init.xavier_uniform_(block)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding) and not getattr(module, "tied", False):
            nn.init.normal_(module.weight, mean=0.0, std=embedding_std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


RECORDING = ("output_hidden_states", "return_dict", "use_cache")  # the stacks' arguments read by capture_outputs


class AaynStack(AaynPreTrainedModel):
    """§3.1 A stack of N identical layers over embedded tokens, with a final LayerNorm in the pre-norm variant. A
    PreTrainedModel (as Bart's stacks) for `capture_outputs`; initialized by the model holding it (no `post_init`)."""

    def __init__(self, config: AaynConfig, embed_tokens: nn.Embedding, layer_class: type[nn.Module], num_layers: int):
        super().__init__(config)
        self.embed = AaynEmbeddings(config, embed_tokens)
        self.layers = nn.ModuleList(layer_class(config, i) for i in range(num_layers))
        self.layer_norm = layer_norm(config) if config.norm_first else None

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed.embed_tokens

    def run_layers(self, hidden_states: torch.Tensor, call) -> torch.Tensor:
        """`call(layer, hidden_states)` through the N layers, then the final norm."""
        for layer in self.layers:
            hidden_states = call(layer, hidden_states)
        return hidden_states if self.layer_norm is None else self.layer_norm(hidden_states)


class AaynEncoder(AaynStack):
    """§3.1 Encoder: N layers of self-attention and feed-forward over the embedded source."""

    _can_record_outputs = {"hidden_states": AaynEncoderLayer, "attentions": OutputRecorder(AaynAttention, index=1)}

    def __init__(self, config: AaynConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens, AaynEncoderLayer, config.encoder_layers)

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,  # output_hidden_states, return_dict: read by capture_outputs
    ) -> BaseModelOutput:
        refuse_unknown("AaynEncoder.forward", kwargs, RECORDING)
        hidden_states = self.embed(input_ids, inputs_embeds)  # (B, S, d_model)
        length = hidden_states.shape[1]
        implementation = attention_implementation(self.config, output_attentions)
        mask = attention_mask_for(implementation, attention_mask, length, length, False, hidden_states)
        hidden_states = self.run_layers(hidden_states, lambda layer, x: layer(x, mask, implementation))
        return BaseModelOutput(last_hidden_state=hidden_states)


class AaynDecoder(AaynStack):
    """§3.1 Decoder: N layers of masked self-attention, encoder-decoder attention and feed-forward over the
    embedded, right-shifted target."""

    _can_record_outputs = {
        "hidden_states": AaynDecoderLayer,
        "attentions": OutputRecorder(AaynAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(AaynAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: AaynConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens, AaynDecoderLayer, config.decoder_layers)

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,  # output_hidden_states, return_dict, use_cache: read by capture_outputs
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        refuse_unknown("AaynDecoder.forward", kwargs, RECORDING)
        cache = decoder_cache(past_key_values)
        past_length = cache.past_length()
        hidden_states = states = self.embed(input_ids, inputs_embeds, past_length)  # (B, T, d_model)
        (batch, length, _), source = hidden_states.shape, encoder_hidden_states.shape[1]
        implementation = attention_implementation(self.config, output_attentions)
        mask = lambda padding, keys, causal: attention_mask_for(implementation, padding, length, keys, causal, states)
        masks = lambda: (mask(attention_mask, past_length + length, True), mask(encoder_attention_mask, source, False))
        hidden_states = self.layers_forward(hidden_states, masks, encoder_hidden_states, cache, implementation)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states.view(batch, length, -1))

    def step(self, input_ids: torch.LongTensor, cache: DecoderCache, encodings: torch.Tensor) -> torch.Tensor:
        """A step of §6.1's search after the first, where `decoding_aayn.plain_steps` holds: what `forward` gives
        for the beams' last tokens `input_ids` (rows, 1) in eval, (rows, d_model), without `forward`'s output
        recording and masks (the cache lays the step out and masks it), the encoder's keys and values read from
        `cache`. `encodings`: the search's §3.5 table (`embed.encodings`, the same values as one position at a
        time)."""
        embeds = self.embed.embed_tokens(input_ids)
        hidden_states = self.embed.add_positions(embeds, cache.position_encoding(encodings))
        hidden_states = self.layers_forward(hidden_states, None, None, cache, self.config._attn_implementation)
        return hidden_states.view(-1, hidden_states.shape[-1])

    def layers_forward(self, hidden_states, masks, encoder_hidden_states, cache, implementation):
        """The N layers over the embedded target, laid out and masked by the cache (`DecoderCache.layout`)."""
        hidden_states, self_mask, cross_mask = cache.layout(hidden_states, masks)
        arguments = (encoder_hidden_states, self_mask, cross_mask, cache, implementation)
        # positional, so that gradient checkpointing passes the encoder states' gradient
        return self.run_layers(hidden_states, lambda layer, x: layer(x, *arguments))


class AaynModel(AaynResizing, AaynPreTrainedModel):
    """The bare encoder-decoder (§3.1, Figure 1), returning the decoder's last hidden states."""

    def __init__(self, config: AaynConfig):
        super().__init__(config)
        vocab, d_model, pad = config.vocab_size, config.d_model, config.pad_token_id
        if config.share_encoder_decoder_embeddings:  # §3.4: one matrix for both embedding layers
            self.shared = nn.Embedding(vocab, d_model, pad)
            source, target = tie_target(self.shared), tie_target(self.shared)
        else:
            source, target = nn.Embedding(vocab, d_model, pad), nn.Embedding(config.decoder_vocab_size, d_model, pad)
        self._tied_weights_keys = tied_weights_keys(self.ties())
        self.encoder = AaynEncoder(config, source)
        self.decoder = AaynDecoder(config, target)
        self.post_init()

    def ties(self) -> dict[str, str]:
        return tied_parameters(self.config, lm_head=False)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed.embed_tokens = value
        if self.config.share_encoder_decoder_embeddings:
            self.shared = self.decoder.embed.embed_tokens = value

    def get_encoder(self) -> AaynEncoder:
        return self.encoder

    def get_decoder(self) -> AaynDecoder:
        return self.decoder

    @either_cache_name
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,  # what transformers' callers pass without a use here (compat_aayn.PASSED_UNUSED)
    ) -> Seq2SeqModelOutput | tuple:
        refuse_unknown("AaynModel.forward", kwargs)
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        use_cache = self.config.use_cache if use_cache is None else use_cache
        return_dict = self.config.return_dict if return_dict is None else return_dict

        if encoder_outputs is None:
            recording = dict(output_attentions=output_attentions, output_hidden_states=output_hidden_states)
            encoder_outputs = self.encoder(input_ids, attention_mask, inputs_embeds, **recording)
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)

        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(), DynamicCache())
        if past_key_values is not None and not isinstance(past_key_values, EncoderDecoderCache):
            raise TypeError(f"past_key_values must be an EncoderDecoderCache, got {type(past_key_values).__name__}")
        if not use_cache:
            past_key_values = None

        decoder_outputs = self.decoder(
            decoder_input_ids,
            encoder_outputs.last_hidden_state,
            attention_mask=decoder_attention_mask,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        output = Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_FIELD: past_key_values},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return output if return_dict else output.to_tuple()


class AaynForConditionalGeneration(AaynDecodingMixin, AaynResizing, AaynPreTrainedModel, GenerationMixin):
    """The encoder-decoder with its pre-softmax projection (§3.4): a translation model for `generate()`."""

    accepts_loss_kwargs = True  # forward takes the Trainer's num_items_in_batch (see label_smoothed_loss)

    def __init__(self, config: AaynConfig):
        super().__init__(config)
        self.model = AaynModel(config)
        self.lm_head = nn.Linear(config.d_model, config.decoder_vocab_size, bias=config.output_bias)
        self._tied_weights_keys = tied_weights_keys(self.ties())
        # stored once (under their source); listed so the Trainer's resume ties them instead of warning of them
        self._keys_to_ignore_on_save = set(self.ties())
        self._decoding_matrix: list[torch.Tensor | None] | None = None  # see output_logits
        self.post_init()
        # §6.1's beam size and alpha are the defaults of new models (generation_config.json keeps them)
        self.generation_config.num_beams = PAPER_NUM_BEAMS
        self.generation_config.length_penalty = PAPER_LENGTH_PENALTY

    def ties(self) -> dict[str, str]:
        return tied_parameters(self.config, lm_head=True)

    def get_encoder(self) -> AaynEncoder:  # 4.57 has no default (those of get_decoder and the embeddings reach .model)
        return self.model.encoder

    @either_cache_name
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        return_logits: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
        **kwargs,  # what transformers' callers pass without a use here (compat_aayn.PASSED_UNUSED)
    ) -> Seq2SeqLMOutput | tuple:
        """With `labels` (-100 where ignored), returns the label-smoothed cross-entropy of §5.4
        (`config.label_smoothing`); the decoder input is then the labels shifted right unless given. The Trainer's
        `num_items_in_batch` (labels over the whole accumulated, all-process batch) makes the loss fairseq's token
        mean over that batch, whatever the gradient accumulation and the number of processes. In training the loss
        is fused with the output layer and `logits` is None unless `return_logits=True`."""
        refuse_unknown("AaynForConditionalGeneration.forward", kwargs)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        smoothing, items = self.config.label_smoothing, num_items_in_batch
        fusable = plain_linear(self.lm_head)  # an adapted output layer (LoRA) is called, not read
        if labels is not None and self.training and torch.is_grad_enabled() and not return_logits and fusable:
            logits = None  # the loss straight from the hidden states, no logits kept
            loss = fused_label_smoothed_loss(outputs.last_hidden_state, self.lm_head, labels, smoothing, items)
        else:  # logits in the parameters' precision, as Marian's: CPU autocast would not upcast a log_softmax
            logits = self.output_logits(outputs.last_hidden_state).to(self.lm_head.weight.dtype)
            loss = None if labels is None else label_smoothed_loss(logits, labels, smoothing, items)
        fields = {name: value for name, value in outputs.items() if name != "last_hidden_state"}  # cache and the rest
        output = Seq2SeqLMOutput(loss=loss, logits=logits, **fields)
        return output if return_dict else output.to_tuple()

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def generate(
        self, inputs: torch.Tensor | None = None, generation_config=None, paper_decoding: bool | None = None, **kwargs
    ):
        """§6.1 decoding (`generation_aayn.py`) unless `paper_decoding=False` or `config.paper_decoding` is off:
        beam search with GNMT's length penalty (`length_penalty` is its alpha) and a limit of source length + 50;
        `num_beams=1` is greedy. Sampling and options that search does not take go to transformers' `generate`."""
        return paper_generate(self, inputs, generation_config, paper_decoding, super().generate, **kwargs)


__all__ = ["AaynForConditionalGeneration", "AaynModel", "AaynPreTrainedModel"]
