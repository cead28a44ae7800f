"""Resizing an AAYN model's vocabularies (transformers' `resize_token_embeddings`), keeping §3.4's one matrix
where the model shares it, and the target side of separate vocabularies (`resize_decoder_token_embeddings`, as in
Marian). A mixin of `AaynForConditionalGeneration`; it travels with saved checkpoints (the model file imports it):
it imports only torch.
"""

from torch import nn


class AaynResizing:
    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """transformers' resizing (new rows at the end, `pad_to_multiple_of`, mean resizing), keeping §3.4's one
        matrix: with shared embeddings the source and target vocabularies, the output layer and every size in the
        config change together. With separate vocabularies this resizes the source side only; the target side
        (decoder embedding and output layer) is `resize_decoder_token_embeddings`, as in Marian."""
        if self.config.share_encoder_decoder_embeddings:
            embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
            self.config.decoder_vocab_size = self.config.vocab_size
            return embeddings
        old = self.get_input_embeddings()
        if new_num_tokens is None and pad_to_multiple_of is None:
            return old
        new = self._get_resized_embeddings(old, new_num_tokens, pad_to_multiple_of, mean_resizing)
        new.requires_grad_(old.weight.requires_grad)
        self.model.encoder.embed.embed_tokens = new
        self.config.vocab_size = new.weight.shape[0]
        return new

    def resize_decoder_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """The target side of separate vocabularies: the decoder's embedding and the output layer (tied to it
        when `tie_word_embeddings`), and `config.decoder_vocab_size`."""
        if self.config.share_encoder_decoder_embeddings:
            raise ValueError(
                "resize_decoder_token_embeddings is for separate vocabularies; this model shares one matrix "
                "(share_encoder_decoder_embeddings=True): use resize_token_embeddings"
            )
        old = self.model.decoder.get_input_embeddings()
        if new_num_tokens is None and pad_to_multiple_of is None:
            return old
        new = self._get_resized_embeddings(old, new_num_tokens, pad_to_multiple_of, mean_resizing)
        new.requires_grad_(old.weight.requires_grad)
        self.model.decoder.embed.embed_tokens = new
        size = new.weight.shape[0]
        if self.config.tie_word_embeddings:
            self.lm_head = nn.Linear(self.config.d_model, size, bias=False, device=new.weight.device)
            self.lm_head.weight = new.weight
        else:
            self.lm_head = self._get_resized_lm_head(self.lm_head, size, mean_resizing=mean_resizing)
        self.config.decoder_vocab_size = size
        return new
