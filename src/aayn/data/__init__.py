"""Data for translation: loading parallel corpora, a shared BPE tokenizer, tokenization, token-based batching.

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
