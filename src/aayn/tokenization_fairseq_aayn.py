"""fairseq's `--tokenizer moses --bpe subword_nmt` pipeline as a transformers tokenizer (an imported folder's).

transformers' FSMT tokenizer is this pipeline as the WMT19 models used it; fairseq's own pipeline (what
`fairseq-interactive` and `TransformerModel.translate` do) differs in three ways, which this subclass takes back:
it does not normalize punctuation first (FSMT turns "`" into "'", fairseq keeps it), its escaping and dash
splitting are settings (`--moses-no-escape`, `--moses-no-dash-splits`), and the target side has its own
dictionary and language (FSMT tokenizes `text_target=` with the source's). Copied into the imported folder as
remote code: it imports only transformers (and sacremoses, which FSMT needs).
"""

from transformers.models.fsmt.tokenization_fsmt import FSMTTokenizer


class FairseqMosesBPETokenizer(FSMTTokenizer):
    """Moses tokenization (sacremoses, as fairseq calls it) then subword-nmt BPE codes, numbered by fairseq's
    dictionaries: source text with the source's, `text_target=` with the target's; decoding undoes both."""

    _auto_class = "AutoTokenizer"  # every save copies this file beside the tokenizer (remote code)

    def __init__(self, *args, moses_escape: bool = True, moses_dash_splits: bool = True, **kwargs):
        self.moses_escape, self.moses_dash_splits = moses_escape, moses_dash_splits
        super().__init__(*args, moses_escape=moses_escape, moses_dash_splits=moses_dash_splits, **kwargs)
        self.source_encoder = self.encoder
        self.target_encoder = {token: index for index, token in self.decoder.items()}
        self.current_lang = self.src_lang

    def _switch_to_input_mode(self):
        self.encoder, self.current_lang = self.source_encoder, self.src_lang

    def _switch_to_target_mode(self):
        self.encoder, self.current_lang = self.target_encoder, self.tgt_lang

    def moses_tokenize(self, text, lang):
        if lang not in self.cache_moses_tokenizer:
            self.cache_moses_tokenizer[lang] = self.sm.MosesTokenizer(lang=lang)
        return self.cache_moses_tokenizer[lang].tokenize(
            text, aggressive_dash_splits=self.moses_dash_splits, return_str=False, escape=self.moses_escape
        )

    def _tokenize(self, text, **kwargs):
        tokens = self.moses_tokenize(text, self.current_lang)
        return [piece for token in tokens if token for piece in self.bpe(token).split(" ")]

    def get_vocab(self):  # the source's, as FSMT's, whichever side is being tokenized
        return dict(getattr(self, "source_encoder", self.encoder), **self.added_tokens_encoder)

    @property
    def src_vocab_size(self):
        return len(getattr(self, "source_encoder", self.encoder))
