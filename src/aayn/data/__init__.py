"""Data for translation: loading parallel corpora, a shared BPE tokenizer, tokenization, token-based batching."""

from .batching import MaxTokensBatchSampler, example_lengths, padding_fraction
from .bible import BIBLE_VERSIONS
from .loading import load_translation_dataset
from .preprocess import tokenize_dataset
from .tokenizer import SPECIAL_TOKENS, save_tokenizer, train_tokenizer

__all__ = [
    "BIBLE_VERSIONS",
    "SPECIAL_TOKENS",
    "MaxTokensBatchSampler",
    "example_lengths",
    "load_translation_dataset",
    "padding_fraction",
    "save_tokenizer",
    "tokenize_dataset",
    "train_tokenizer",
]
