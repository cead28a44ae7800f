"""Resizing an AAYN model's vocabularies (transformers' `resize_token_embeddings`), keeping §3.4's one matrix
where the model shares it, and the target side of separate vocabularies (`resize_decoder_token_embeddings`, as in
Marian). A mixin of `AaynModel` and `AaynForConditionalGeneration`; it travels with saved checkpoints (the model
file imports it): it imports only torch.
"""

from torch import nn


class AaynResizing:
    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """transformers' resizing (new rows at the end, `pad_to_multiple_of`, mean resizing, `config.vocab_size`
        and `vocab_size` set, ties renewed), keeping §3.4's one matrix: with shared embeddings the source and target
        vocabularies and the output layer change together. With separate vocabularies this resizes the source side
        only; the target side (decoder embedding and output layer) is `resize_decoder_token_embeddings`, as in
        Marian."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if self.config.share_encoder_decoder_embeddings:
            self.config.decoder_vocab_size = self.config.vocab_size
        return embeddings

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True) -> nn.Embedding:
        """transformers' step that replaces the matrices; with separate vocabularies the output layer is the
        target side's and keeps its size."""
        if self.config.share_encoder_decoder_embeddings:
            return super()._resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        old = self.get_input_embeddings()
        new = self._get_resized_embeddings(old, new_num_tokens, pad_to_multiple_of, mean_resizing)
        new.requires_grad_(old.weight.requires_grad)
        self.set_input_embeddings(new)
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
        decoder = self.get_decoder()
        old = decoder.get_input_embeddings()
        if new_num_tokens is None and pad_to_multiple_of is None:
            return old
        new = self._get_resized_embeddings(old, new_num_tokens, pad_to_multiple_of, mean_resizing)
        new.requires_grad_(old.weight.requires_grad)
        decoder.embed.embed_tokens = new
        size = new.weight.shape[0]
        lm_head = self.get_output_embeddings()
        if lm_head is not None:
            self.set_output_embeddings(self._get_resized_lm_head(lm_head, size, mean_resizing=mean_resizing))
        self.config.decoder_vocab_size = size
        self.tie_weights()  # a tied output layer is the new matrix itself
        return new
