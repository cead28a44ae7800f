"""A tiny parallel corpus and recipe for training tests: digits spelled out in English and French."""

import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import yaml

EN = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
FR = ["zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf"]

# what every folder aayn writes holds, whichever tool wrote it
FOLDER_FILES = {
    "model.safetensors",
    "config.json",
    "configuration_aayn.py",
    "modeling_aayn.py",
    "compat_aayn.py",
    "generation_aayn.py",
    "search_aayn.py",
    "cache_aayn.py",
    "policy_aayn.py",
    "resize_aayn.py",
    "ops_aayn.py",
    "hub_aayn.py",
    "pipeline_aayn.py",
    "tokenizer.json",
    "tokenizer_config.json",
}

# a run of 4 steps with checkpoints 2 and 4, no validation, greedy test decoding of 4 sentences
FAST = dict(
    max_steps=4,
    save_steps=2,
    eval_strategy="no",
    generation_num_beams=1,
    max_predict_samples=4,
    num_examples_to_print=0,
)

# sentence pairs of different lengths (so that a per-micro-batch mean differs from the mean over all tokens)
EIGHT_PAIRS = [
    ("Six one eight.", "Six un huit."),
    ("Two.", "Deux."),
    ("Zero nine nine five three four.", "Zéro neuf neuf cinq trois quatre."),
    ("One.", "Un."),
    ("Seven seven.", "Sept sept."),
    ("Three four five six seven eight nine.", "Trois quatre cinq six sept huit neuf."),
    ("Eight.", "Huit."),
    ("Nine zero.", "Neuf zéro."),
]


def write_numbers_corpus(folder: Path, sizes=(("train", 240), ("validation", 16), ("test", 16)), seed: int = 0) -> Path:
    """Line-aligned `{split}.en` / `{split}.fr`: "Six one eight." -> "Six un huit."."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, count in sizes:
        english, french = [], []
        for _ in range(count):
            digits = [rng.randrange(10) for _ in range(rng.randint(1, 5))]
            english.append(" ".join(EN[d] for d in digits).capitalize() + ".")
            french.append(" ".join(FR[d] for d in digits).capitalize() + ".")
        (folder / f"{split}.en").write_text("\n".join(english) + "\n", encoding="utf-8")
        (folder / f"{split}.fr").write_text("\n".join(french) + "\n", encoding="utf-8")
    return folder


def tiny_recipe(data: Path, output_dir: Path, **overrides) -> dict:
    recipe = {
        "dataset_name": str(data),
        "source_lang": "en",
        "target_lang": "fr",
        "vocab_size": 300,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "attention_heads": 4,
        "ffn_dim": 64,
        "dropout": 0.1,
        "output_dir": str(output_dir),
        "max_tokens": 400,
        "max_steps": 8,
        "learning_rate": 0.003,
        "lr_scheduler_type": "inverse_sqrt",
        "warmup_steps": 4,
        "adam_beta2": 0.98,
        "adam_epsilon": 1e-9,
        "weight_decay": 0.0,
        "label_smoothing_factor": 0.1,
        "predict_with_generate": True,
        "generation_num_beams": 2,
        "generation_max_length": 24,
        "eval_strategy": "steps",
        "eval_steps": 4,
        "save_steps": 4,
        "logging_steps": 2,
        "report_to": ["tensorboard"],
        "dataloader_pin_memory": False,
        "use_cpu": True,
        "seed": 0,
        "num_examples_to_print": 2,
    }
    recipe.update(overrides)
    return recipe


def write_recipe(path: Path, recipe: dict) -> Path:
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


SCRIPTS = Path(__file__).parent / "scripts"


def free_port() -> int:
    """A TCP port free on this machine now (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python(*args, env: dict | None = None, **kwargs):
    """This Python on `args`, offline, one thread per process, its output captured."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, env=env, **kwargs)


def made_once(tmp_path_factory, name: str, make) -> Path:
    """The folder `name`, made by `make(folder)` once per test run and shared by every test module and, under
    pytest-xdist, by every worker (the first to ask makes it, holding a lock; the others wait and read it). Tests
    that change what it holds work on a copy."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: gw0/, gw1/ under one run folder
    folder, done = root / "made-once" / name, root / "made-once" / f"{name}.done"
    folder.parent.mkdir(exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a try that failed part way
            make(folder)
            done.touch()
    return folder


def trained_on_two_pairs(tmp_path: Path, **changes) -> Path:
    """`aayn train` of a tiny model over es-en and en-fr of the Bible (2 steps, unless `changes` say otherwise) in
    `tmp_path`, its cache its own: the output folder."""
    import datasets
    import pytest

    from aayn.cli import main as aayn

    out = tmp_path / "out"
    recipe = {
        "dataset_name": "bible", "lang_pairs": "es-en,en-fr", "sampling_temperature": 1.0, "output_dir": str(out),
        "max_train_samples": 160, "max_eval_samples": 6, "max_predict_samples": 6, "vocab_size": 500,
        "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "attention_heads": 2, "ffn_dim": 64,
        "max_source_length": 96, "max_target_length": 96, "max_steps": 2, "per_device_train_batch_size": 8,
        "eval_strategy": "no", "save_strategy": "no", "predict_with_generate": True, "generation_num_beams": 1,
        "generation_max_length": 8, "num_examples_to_print": 0, "report_to": "none", **changes,
    }  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # (read where datasets loads)
        assert aayn(["train", str(write_recipe(tmp_path / "r.yaml", recipe))]) == 0
    return out
