"""Data for translation, a module each: loading parallel corpora (`loading`: the Hub, local folders and files; `bible`:
the embedded corpus), the shared vocabulary (`tokenizer`: byte-level BPE or SentencePiece), tokenization
(`preprocess`) and preparing it once (`prepare`), several pairs in one run (`multilingual`: language tokens,
temperature sampling), subword regularization (`subwords`: BPE-dropout, SentencePiece sampling), token-based
batching (`token_batches`, `batching`: training's sampler and the loader's shared epoch), cleaning's rules
(`cleaning`) and back-translated pairs (`synthetic`: noise, mixing ratios).

Names load on first use: translating needs the batch sampler, not datasets (whose import, with pandas and pyarrow,
costs a command like `aayn translate` about a second).
"""

from .. import lazy_attributes

_NAMES = {
    "BIBLE_VERSIONS": "bible",
    "DataPlan": "prepare",
    "prepare_data": "prepare",
    "SPECIAL_TOKENS": "tokenizer",
    "MaxTokensBatchSampler": "batching",
    "example_lengths": "batching",
    "load_translation_dataset": "loading",
    "padding_fraction": "batching",
    "save_tokenizer": "tokenizer",
    "tokenize_dataset": "preprocess",
    "train_tokenizer": "tokenizer",
}

__getattr__ = lazy_attributes(__name__, _NAMES)

__all__ = list(_NAMES)
