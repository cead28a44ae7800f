"""LoRA through peft: adapters on any of the model's projections (LORA_TARGET_MODULES) change training and decoding,
the output layer included (the fused loss and the CPU decoding copy read a plain matrix, so they step aside for an
adapted one); `merge_and_unload()` then `save_pretrained` gives a folder whose translations, in a process that never
imports aayn (pipeline("translation")), are the adapter model's."""

import json
import os
import subprocess
import sys

import pytest
import torch
from reference_search import reference_greedy
from tiny_models import random_batch, tiny_config
from torch.nn import functional as F

from aayn import LORA_TARGET_MODULES, AaynForConditionalGeneration
from aayn.data.tokenizer import save_tokenizer

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)

peft = pytest.importorskip("peft")


def adapted(model, targets):
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)  # B != 0
    return peft.get_peft_model(model, config)


@pytest.mark.parametrize("targets", [LORA_TARGET_MODULES, ["lm_head"], ["qkv_proj", "fc2"]])
def test_adapters_change_training_and_decoding(targets):
    """Against references outside the model's kernels: the label-smoothed loss from the logits of a plain forward
    (the output layer called as a module), and greedy decoding written out with full forward passes."""
    torch.manual_seed(0)
    model = adapted(AaynForConditionalGeneration(tiny_config(label_smoothing=0.1)).double(), targets)
    wrapped = {name.split(".")[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")}
    assert wrapped == set(targets)
    source, mask = random_batch(3, 7, 40, [7, 5, 2])
    labels, _ = random_batch(3, 6, 40)
    model.train()
    loss = model(input_ids=source, attention_mask=mask, labels=labels).loss  # the fused loss where it may
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "lora_" in n)
    model.eval()
    with torch.no_grad():
        decoder_input = model.prepare_decoder_input_ids_from_labels(labels)
        logits = model(input_ids=source, attention_mask=mask, decoder_input_ids=decoder_input).logits
    expected = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing=0.1)
    torch.testing.assert_close(loss.detach().double(), expected, rtol=1e-6, atol=1e-6)  # the loss sums in float32
    generated = model.generate(input_ids=source, attention_mask=mask, num_beams=1, max_new_tokens=6)
    for row, n in enumerate([7, 5, 2]):
        [(_, tokens)] = reference_greedy(model, source[row, :n], 0.6, limit=6)
        assert generated[row, 1 : 1 + len(tokens)].tolist() == tokens


def test_merging_adapters_off_the_output_layer_gives_the_same_model():
    torch.manual_seed(0)
    model = adapted(AaynForConditionalGeneration(tiny_config()).double(), LORA_TARGET_MODULES).eval()
    source, mask = random_batch(3, 7, 40, [7, 5, 2])
    generated = model.generate(input_ids=source, attention_mask=mask, num_beams=2, max_new_tokens=6)
    merged = model.merge_and_unload()
    assert type(merged) is AaynForConditionalGeneration
    assert torch.equal(merged.generate(source, attention_mask=mask, num_beams=2, max_new_tokens=6), generated)


USE = """
import json, sys
from transformers import pipeline
translate = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
assert "aayn" not in sys.modules
print(json.dumps([row["translation_text"] for row in translate(["six one eight", "two zero"], max_new_tokens=8)]))
"""


def test_merged_adapter_model_translates_the_same_without_aayn(saved, tmp_path):
    folder, _, tokenizer = saved
    torch.manual_seed(0)
    model = adapted(AaynForConditionalGeneration.from_pretrained(folder), LORA_TARGET_MODULES).eval()
    batch = tokenizer(["six one eight", "two zero"], return_tensors="pt", padding=True)
    expected = tokenizer.batch_decode(model.generate(**batch, max_new_tokens=8), skip_special_tokens=True)
    model.merge_and_unload().save_pretrained(tmp_path / "merged")
    save_tokenizer(tokenizer, tmp_path / "merged")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run([sys.executable, "-c", USE, str(tmp_path / "merged")], capture_output=True, text=True,
                            env=env, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [text.strip() for text in expected]
