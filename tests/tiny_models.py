"""What many test modules share: tiny model configs, random batches, and the mark of checks made once across the
two transformers lines. Test modules import it; none imports another test module or conftest."""

import os

import pytest
import torch
import transformers

from aayn import AaynConfig

# .ci/run runs the suite on both transformers lines, each with the other line's Python at hand (AAYN_OTHER_PYTHON).
# A test that proves the same thing from either side (a check across the two lines, made in both directions from
# one side; the README's commands, which a fresh install runs on the newest line) runs in the 5.x suite only.
ONCE_ACROSS_LINES = pytest.mark.skipif(
    bool(os.environ.get("AAYN_OTHER_PYTHON")) and int(transformers.__version__.split(".")[0]) < 5,
    reason="run once by .ci/run, in its transformers 5.x suite (this proves the same from either line)",
)


def tiny_config(**overrides) -> AaynConfig:
    """A model small enough for CPU tests in milliseconds, with every architectural feature of the base model."""
    values = dict(
        vocab_size=40,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        dropout=0.0,
        max_position_embeddings=64,
    )
    values.update(overrides)
    return AaynConfig(**values)


def random_batch(batch: int, length: int, vocab_size: int, lengths: list[int] | None = None):
    """Token ids in [4, vocab) (clear of the special ids) right-padded to `lengths`, and their attention mask."""
    ids = torch.randint(4, vocab_size, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    for row, n in enumerate(lengths or []):
        ids[row, n:] = 0
        mask[row, n:] = 0
    return ids, mask
