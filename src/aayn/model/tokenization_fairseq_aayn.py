"""fairseq's `--tokenizer moses --bpe subword_nmt` pipeline as a transformers tokenizer (an imported folder's), and its
`--bpe sentencepiece` pipeline for a dictionary that lacks pieces of its SentencePiece model.

transformers' FSMT tokenizer is this pipeline as the WMT19 models used it; fairseq's own pipeline (what
`fairseq-interactive` and `TransformerModel.translate` do) differs in three ways, which this subclass takes back:
it does not normalize punctuation first (FSMT turns "`" into "'", fairseq keeps it), its escaping and dash
splitting are settings (`--moses-no-escape`, `--moses-no-dash-splits`), and the target side has its own
dictionary and language (FSMT tokenizes `text_target=` with the source's). Copied into the imported folder as
remote code: it imports only transformers (and sacremoses, which FSMT needs; sentencepiece for the other).
"""

import json
import os
import shutil

from transformers import PreTrainedTokenizer
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


class FairseqSentencePieceTokenizer(PreTrainedTokenizer):
    """fairseq's `--bpe sentencepiece` pipeline where the dictionary lacks pieces of the SentencePiece model: the
    model segments the text (the `sentencepiece` library itself), the dictionary numbers the pieces, and a piece it
    lacks is `<unk>`, as fairseq reads it; every text ends with `</s>`. Decoding joins the pieces, "▁" as spaces,
    the text stripped (fairseq's `SentencepieceBPE.decode`). An imported folder whose dictionary holds every piece
    has a `tokenizers` tokenizer instead (the same ids, no `sentencepiece` needed)."""

    vocab_files_names = {"sentencepiece_file": "sentencepiece.model", "vocab_file": "vocab.json"}
    model_input_names = ["input_ids", "attention_mask"]
    _auto_class = "AutoTokenizer"  # every save copies this file beside the tokenizer (remote code)

    def __init__(self, sentencepiece_file, vocab_file, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                 pad_token="<pad>", **kwargs):  # fmt: skip
        import sentencepiece

        self.sentencepiece_file, self.vocab_file = sentencepiece_file, vocab_file
        self.processor = sentencepiece.SentencePieceProcessor(model_file=str(sentencepiece_file))
        with open(vocab_file, encoding="utf-8") as file:
            self.encoder = json.load(file)
        self.decoder = {index: piece for piece, index in self.encoder.items()}
        super().__init__(bos_token=bos_token, eos_token=eos_token, unk_token=unk_token, pad_token=pad_token, **kwargs)

    @property
    def vocab_size(self) -> int:
        return len(self.encoder)

    def get_vocab(self) -> dict:
        return dict(self.encoder, **self.added_tokens_encoder)

    def _tokenize(self, text, **kwargs):
        return self.processor.encode(text, out_type=str)

    def _convert_token_to_id(self, token):
        return self.encoder.get(token, self.encoder[str(self.unk_token)])

    def _convert_id_to_token(self, index):
        return self.decoder.get(index, str(self.unk_token))

    def convert_tokens_to_string(self, tokens):
        return "".join(tokens).replace(" ", "").replace("▁", " ").strip()

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        return token_ids_0 + (token_ids_1 or []) + [self.eos_token_id]

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None, already_has_special_tokens=False):
        if already_has_special_tokens:
            return super().get_special_tokens_mask(token_ids_0, token_ids_1, already_has_special_tokens=True)
        return [0] * (len(token_ids_0) + len(token_ids_1 or [])) + [1]

    def save_vocabulary(self, save_directory, filename_prefix=None):
        prefix = filename_prefix + "-" if filename_prefix else ""
        model = os.path.join(save_directory, prefix + self.vocab_files_names["sentencepiece_file"])
        vocab = os.path.join(save_directory, prefix + self.vocab_files_names["vocab_file"])
        if os.path.abspath(model) != os.path.abspath(self.sentencepiece_file):
            shutil.copyfile(self.sentencepiece_file, model)
        with open(vocab, "w", encoding="utf-8") as file:
            file.write(json.dumps(self.encoder, indent=1, ensure_ascii=False) + "\n")
        return model, vocab
