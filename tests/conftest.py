import os
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_config


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


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
