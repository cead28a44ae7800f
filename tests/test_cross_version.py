"""A folder saved on one transformers line is used on the other (4.57 <-> 5.x), both directions, in fresh
processes that never import aayn: config, tokenizer, model, generate (alignments too) and pipeline("translation")
agree.

Needs a second Python whose transformers is of the other line, with aayn installed (to write a folder there):
`.ci/run` builds one venv per line and points AAYN_OTHER_PYTHON at the other one.
"""

import json
import os
import subprocess
import sys

import pytest
from tiny_models import ONCE_ACROSS_LINES
from training_helpers import tiny_recipe, write_numbers_corpus, write_recipe

OTHER_PYTHON = os.environ.get("AAYN_OTHER_PYTHON")
pytestmark = [
    pytest.mark.both_lines,
    pytest.mark.skipif(
        not OTHER_PYTHON,
        reason="AAYN_OTHER_PYTHON is not set (a python with the other transformers line; .ci/run sets it)",
    ),
    ONCE_ACROSS_LINES,  # both directions, from the 5.x side
]

USE = """
import json, sys
import transformers
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
sources = ["Six one eight.", "Two zero."]
for path in sys.argv[1:]:  # each folder in turn: one process pays the imports once
    config = AutoConfig.from_pretrained(path, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    generated = tokenizer.batch_decode(model.generate(**batch, max_new_tokens=8), skip_special_tokens=True)
    aligned = model.generate(**batch, num_beams=2, max_new_tokens=8, output_alignments=True,
                             return_dict_in_generate=True)
    translate = pipeline("translation", model=path, trust_remote_code=True)
    assert "aayn" not in sys.modules
    print(json.dumps({
        "transformers": transformers.__version__,
        "model_type": config.model_type,
        "ids": batch["input_ids"].tolist(),
        "generate": [text.strip() for text in generated],
        "alignments": aligned.alignments.argmax(-1).tolist(),  # kept by the search: the folder's own code, no aayn
        "pipeline": [row["translation_text"] for row in translate(sources, max_new_tokens=8)],
    }))
"""


def use(python: str, folder, *more) -> list[dict]:
    """What `python` makes of each folder, in one fresh process."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    folders = [str(path) for path in (folder, *more)]
    result = subprocess.run([python, "-c", USE, *folders], capture_output=True, text=True, env=env, cwd=folder)
    assert result.returncode == 0, f"{python}: {result.stderr[-3000:]}"
    return [json.loads(line) for line in result.stdout.strip().splitlines()[-len(folders) :]]


def train(python: str, tmp_path, name: str):
    corpus = write_numbers_corpus(tmp_path / "data")
    recipe = tiny_recipe(
        corpus,
        tmp_path / name,
        max_steps=4,
        eval_strategy="no",
        save_steps=4,
        generation_num_beams=1,
        max_predict_samples=4,
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [python, "-m", "aayn.train", str(write_recipe(tmp_path / f"{name}.yaml", recipe))],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, f"{python}: {result.stderr[-3000:]}"
    return tmp_path / name


@pytest.mark.parametrize("saved_by", ["this line", "the other line"])
def test_a_folder_saved_on_one_line_works_on_the_other(tmp_path, saved_by):
    writer = sys.executable if saved_by == "this line" else OTHER_PYTHON
    folder = train(writer, tmp_path, "run")
    checkpoint = folder / "checkpoint-4"  # checkpoints are folders users load too: loaded on the other line
    here, *here_checkpoint = use(sys.executable, folder, *([checkpoint] if writer == OTHER_PYTHON else []))
    there, *there_checkpoint = use(OTHER_PYTHON, folder, *([checkpoint] if writer == sys.executable else []))
    assert here["transformers"].split(".")[0] != there["transformers"].split(".")[0]  # really two lines
    assert here["model_type"] == there["model_type"] == "aayn"
    assert here["ids"] == there["ids"]
    assert here["generate"] == there["generate"] and here["pipeline"] == there["pipeline"] == here["generate"]
    assert here["alignments"] == there["alignments"] and len(here["alignments"]) == 2
    assert [loaded["model_type"] for loaded in here_checkpoint + there_checkpoint] == ["aayn"]
