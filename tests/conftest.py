from pathlib import Path

import pytest
import torch

from aayn import AaynConfig


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


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def random_batch(batch: int, length: int, vocab_size: int, lengths: list[int] | None = None):
    """Token ids in [4, vocab) (clear of the special ids) right-padded to `lengths`, and their attention mask."""
    ids = torch.randint(4, vocab_size, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    for row, n in enumerate(lengths or []):
        ids[row, n:] = 0
        mask[row, n:] = 0
    return ids, mask


WMT14_MINI = Path(__file__).resolve().parents[2] / "shared" / "data" / "wmt14-mini"


@pytest.fixture
def wmt14_mini() -> Path:
    """The offline stand-in for the Hub's wmt/wmt14 that CI has beside the checkout; users may not."""
    if not WMT14_MINI.is_dir():
        pytest.skip(f"{WMT14_MINI} is absent")
    return WMT14_MINI
