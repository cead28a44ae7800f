"""Checkpoints: Auto classes, tied weights stored once, Hub remote code loaded by a process without aayn."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from tiny_models import ONCE_ACROSS_LINES, random_batch, tiny_config
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from aayn import AaynForConditionalGeneration, AaynModel

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def logits_of(model, source, mask, target):
    with torch.no_grad():
        return model(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": True},
        {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 30},
        {"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 30, "tie_word_embeddings": False},
        {"tie_word_embeddings": False},
    ],
    ids=["paper", "pre-norm", "separate-vocabularies", "nothing-tied", "shared-embeddings-own-projection"],
)
def test_auto_round_trip_gives_identical_logits(tmp_path, overrides):
    model = AaynForConditionalGeneration(tiny_config(**overrides)).eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is AaynForConditionalGeneration
    source, mask = random_batch(2, 6, 30, [6, 4])
    target, _ = random_batch(2, 5, 30)
    assert torch.equal(logits_of(loaded, source, mask, target), logits_of(model, source, mask, target))
    config = loaded.config
    decoder_embeddings = loaded.model.decoder.get_input_embeddings().weight
    assert (loaded.lm_head.weight is decoder_embeddings) == config.tie_word_embeddings
    assert (loaded.model.encoder.get_input_embeddings().weight is decoder_embeddings) == (
        config.share_encoder_decoder_embeddings
    )


def test_the_tied_matrix_is_stored_once_and_positions_not_at_all(tmp_path):
    AaynForConditionalGeneration(tiny_config()).save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as weights:
        keys = set(weights.keys())
    assert [key for key in keys if "embed" in key or "lm_head" in key or "shared" in key] == ["model.shared.weight"]
    assert not [key for key in keys if "position" in key]


def test_save_writes_the_code_and_auto_map(tmp_path):
    AaynForConditionalGeneration(tiny_config()).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "aayn"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_aayn.AaynConfig",
        "AutoModelForSeq2SeqLM": "modeling_aayn.AaynForConditionalGeneration",
    }
    assert (tmp_path / "modeling_aayn.py").exists() and (tmp_path / "configuration_aayn.py").exists()


def test_bare_model_round_trip(tmp_path):
    model = AaynModel(tiny_config()).eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    source, mask = random_batch(2, 6, 40, [6, 3])
    with torch.no_grad():
        expected = model(input_ids=source, attention_mask=mask, decoder_input_ids=source).last_hidden_state
        actual = loaded(input_ids=source, attention_mask=mask, decoder_input_ids=source).last_hidden_state
    assert torch.equal(actual, expected)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "aayn"


def test_a_process_that_never_imports_aayn_loads_the_folder_as_remote_code(tmp_path):
    model = AaynForConditionalGeneration(tiny_config()).eval()
    model.save_pretrained(tmp_path / "model")
    assert not list((tmp_path / "model").glob("*graph*"))  # what a folder need not carry (`aayn.model`)
    source, mask = random_batch(2, 6, 40, [6, 4])
    target, _ = random_batch(2, 5, 40)
    torch.save({"source": source, "mask": mask, "target": target}, tmp_path / "inputs.pt")
    script = f"""
import sys, torch
from transformers import AutoModelForSeq2SeqLM
model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path / "model")!r}, trust_remote_code=True).eval()
assert "aayn" not in sys.modules, "aayn was imported"
assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
inputs = torch.load({str(tmp_path / "inputs.pt")!r})
with torch.no_grad():
    logits = model(input_ids=inputs["source"], attention_mask=inputs["mask"], decoder_input_ids=inputs["target"]).logits
generated = model.generate(inputs["source"], attention_mask=inputs["mask"], num_beams=2, max_new_tokens=4)
torch.save({{"logits": logits, "generated": generated}}, {str(tmp_path / "outputs.pt")!r})
sys.modules["aayn"] = None  # as where aayn is not installed: the CUDA graphs are the package's, refused in one line
try:
    model.generate(inputs["source"], attention_mask=inputs["mask"], cuda_graphs=True)
except ImportError as error:
    assert "generate(cuda_graphs=True) and generate(compiled_steps=True) need the aayn package" in str(error), error
else:
    raise AssertionError("cuda_graphs decoded without aayn")
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    # run from an empty folder so that the source checkout is not importable by accident
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path, env=env, timeout=300)
    outputs = torch.load(tmp_path / "outputs.pt")
    assert torch.equal(outputs["logits"], logits_of(model, source, mask, target))
    expected = model.generate(source, attention_mask=mask, num_beams=2, max_new_tokens=4)
    assert torch.equal(outputs["generated"], expected)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_attention_implementation_is_chosen_at_load_time(tmp_path, attn_implementation):
    model = AaynForConditionalGeneration(tiny_config()).eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, attn_implementation=attn_implementation).eval()
    assert loaded.config._attn_implementation == attn_implementation
    assert loaded.model.decoder.layers[0].self_attn.config._attn_implementation == attn_implementation
    source, mask = random_batch(2, 6, 40, [6, 4])
    target, _ = random_batch(2, 5, 40)
    torch.testing.assert_close(logits_of(loaded, source, mask, target), logits_of(model, source, mask, target))


def test_set_attn_implementation_switches_a_loaded_model(tmp_path, monkeypatch):
    """`model.set_attn_implementation("eager")` (transformers' documented way to switch after loading) changes what
    the next forward calls, on both transformers lines; both guessed from our source that it could not and kept
    the old implementation (5.x with a warning)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    AaynForConditionalGeneration(tiny_config()).save_pretrained(tmp_path)
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    calls = []
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "sdpa", lambda *args, **kw: calls.append(1) or sdpa(*args, **kw))
    source, mask = random_batch(2, 6, 40, [6, 4])
    target, _ = random_batch(2, 5, 40)
    expected = logits_of(model, source, mask, target)
    assert len(calls) == 2 * 2 + 2  # encoder self-attention; decoder self- and cross-attention
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    torch.testing.assert_close(logits_of(model, source, mask, target), expected)
    assert len(calls) == 6  # no sdpa call any more


@pytest.mark.parametrize(
    "overrides, names",
    [
        ({}, ["lm_head.weight", "model.decoder.embed.embed_tokens.weight", "model.encoder.embed.embed_tokens.weight",
              "model.shared.weight"]),
        ({"tie_word_embeddings": False}, ["model.decoder.embed.embed_tokens.weight",
                                          "model.encoder.embed.embed_tokens.weight", "model.shared.weight"]),
        ({"share_encoder_decoder_embeddings": False, "decoder_vocab_size": 30},
         ["lm_head.weight", "model.decoder.embed.embed_tokens.weight"]),
    ],
    ids=["shared-and-tied", "shared-own-projection", "separate-tied"],
)  # fmt: skip
def test_a_checkpoint_without_its_embedding_names_it_missing_and_initializes_it(tmp_path, overrides, names):
    """A checkpoint whose (shared) embedding matrix was left out: every name tied to it is reported in
    `missing_keys`, the matrix is drawn by aayn's initialization (N(0, d_model^-0.5), padding row zero), the ties
    hold, and the model runs; the rest is loaded as saved."""
    from safetensors.torch import load_file, save_file

    model = AaynForConditionalGeneration(tiny_config(**overrides)).eval()
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    source = "model.shared.weight" if "model.shared.weight" in names else "model.decoder.embed.embed_tokens.weight"
    del weights[source]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded, info = AaynForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert sorted(info["missing_keys"]) == names
    matrix = loaded.get_parameter(source)
    assert matrix.device.type == "cpu"
    assert not matrix[0].any() and abs(matrix[1:].std().item() - 32**-0.5) < 0.02
    for name in names:
        assert loaded.get_parameter(name) is matrix
    for name, value in weights.items():
        assert torch.equal(loaded.state_dict()[name], value), name
    source_ids, mask = random_batch(2, 6, 30, [6, 4])
    target, _ = random_batch(2, 5, 30)
    assert torch.isfinite(logits_of(loaded.eval(), source_ids, mask, target)).all()


@ONCE_ACROSS_LINES  # aayn's own import hook, the same on both lines
def test_any_model_file_imported_first_registers_aayn_with_the_auto_classes():
    """In a fresh process, importing any of the files that travel with a checkpoint first (`aayn.model.decoding_aayn`,
    say, as a benchmark does) leaves no half-imported module behind, and aayn is registered: AutoConfig knows it.
    One process imports torch and transformers' model classes (no aayn module), then forks a child per file: each
    child is a process in which that file is the first of aayn imported, without paying those imports 13 times."""
    from pathlib import Path

    import aayn

    names = sorted(path.stem for path in (Path(aayn.__file__).parent / "model").glob("*_aayn.py"))
    script = """
import importlib, os, sys
import torch
from transformers import AutoConfig, PreTrainedModel
assert not [name for name in sys.modules if name.split(".")[0] == "aayn"]
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module("aayn.model." + name)
            print(name, type(AutoConfig.for_model("aayn")).__name__, flush=True)
            os._exit(0)
        except BaseException as error:
            print(name, "failed:", repr(error), flush=True)
            os._exit(1)
    os.waitpid(pid, 0)
"""
    env = dict(os.environ, OMP_NUM_THREADS="1")  # no thread pool in the parent: forking it is safe
    command = [sys.executable, "-c", script, *names]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [f"{name} AaynConfig" for name in names], result.stderr[-2000:]
