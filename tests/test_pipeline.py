"""pipeline("translation") on both transformers lines, from a process that never imports aayn."""

import json
import os
import subprocess
import sys

import pytest

from aayn import translation_pipeline

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)

SOURCES = ["Six one eight.", "Two.", "Zero nine nine five three."]


def reference(model, tokenizer, text, **generate):
    """The translation computed directly: tokenize, generate, decode."""
    ids = model.generate(**tokenizer([text], return_tensors="pt"), **generate)
    return tokenizer.decode(ids[0], skip_special_tokens=True).strip()


def test_pipeline_from_a_fresh_process_without_aayn(saved):
    path, model, tokenizer = saved
    script = f"""
import json, sys
from transformers import pipeline
translate = pipeline("translation", model={str(path)!r}, trust_remote_code=True)
out = {{
    "single": translate({SOURCES[0]!r}, max_new_tokens=8),
    "batch": translate({SOURCES!r}, batch_size=2, max_new_tokens=8),
    "beams": translate({SOURCES[0]!r}, num_beams=3, max_new_tokens=8),
    "empty": translate(["", {SOURCES[1]!r}], max_new_tokens=8),
    "long": translate("Six " * 40, max_new_tokens=4),
    "class": type(translate).__name__,
    "imported": "aayn" in sys.modules,
}}
print(json.dumps(out))
"""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["class"] == "AaynTranslationPipeline" and not out["imported"]
    expected = [reference(model, tokenizer, text, max_new_tokens=8) for text in SOURCES]
    assert out["single"] == [{"translation_text": expected[0]}]
    assert out["batch"] == [{"translation_text": text} for text in expected]
    assert out["beams"] == [
        {"translation_text": reference(model, tokenizer, SOURCES[0], num_beams=3, max_new_tokens=8)}
    ]
    assert out["empty"] == [{"translation_text": ""}, {"translation_text": expected[1]}]
    assert len(out["long"]) == 1 and "truncated to max_source_length=32" in result.stderr


def test_shortest_call_with_aayn_installed(saved):
    path, model, tokenizer = saved
    translate = translation_pipeline(str(path))
    assert translate(SOURCES[1], max_new_tokens=8) == [
        {"translation_text": reference(model, tokenizer, SOURCES[1], max_new_tokens=8)}
    ]
    with pytest.raises(TypeError, match="takes a string or a list of strings, got int"):
        translate(3)


def test_saved_folder_carries_the_pipeline(saved):
    path, _, _ = saved
    config = json.loads((path / "config.json").read_text())
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_aayn.AaynTranslationPipeline"
    assert (path / "pipeline_aayn.py").is_file()
