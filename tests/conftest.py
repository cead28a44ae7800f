import os
from pathlib import Path

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


@pytest.fixture
def wmt14_mini() -> Path:
    """The offline stand-in for the Hub's wmt/wmt14 (a folder laid out like it), named by $AAYN_WMT14_MINI: .ci/run
    points it at ../shared/data/wmt14-mini; users without one see these tests skipped, with this reason."""
    folder = os.environ.get("AAYN_WMT14_MINI")
    if not folder:
        pytest.skip("AAYN_WMT14_MINI is not set (a folder laid out like the Hub's wmt/wmt14)")
    if not Path(folder).is_dir():
        raise FileNotFoundError(f"AAYN_WMT14_MINI={folder} is not a folder")
    return Path(folder)


@pytest.fixture(scope="session")
def saved(tmp_path_factory):
    """An untrained tiny model and a BPE tokenizer (numbers corpus), saved: (folder, model, tokenizer)."""
    from training_helpers import write_numbers_corpus

    from aayn import AaynForConditionalGeneration
    from aayn.data import load_translation_dataset, train_tokenizer

    folder = tmp_path_factory.mktemp("model")
    data = load_translation_dataset(str(write_numbers_corpus(folder / "data")), source_lang="en", target_lang="fr")
    tokenizer = train_tokenizer(data["train"], source_lang="en", target_lang="fr", vocab_size=300, show_progress=False)
    tokenizer.model_max_length = 32
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    model.save_pretrained(folder / "out")
    tokenizer.save_pretrained(folder / "out")
    return folder / "out", model.eval(), tokenizer
