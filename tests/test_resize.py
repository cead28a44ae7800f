"""Vocabulary changes: `resize_token_embeddings` keeps §3.4's one matrix and every size the config holds; separate
vocabularies resize side by side (`resize_decoder_token_embeddings`, as Marian). Checked against the unresized
model, and through a save that a process without aayn loads (on this transformers line and, where .ci/run gives
one, the other)."""

import json
import os
import subprocess
import sys

import pytest
import torch
from tiny_models import random_batch, tiny_config

from aayn import AaynConfig, AaynForConditionalGeneration, AaynModel
from aayn.data.tokenizer import save_tokenizer

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def test_adding_a_token_keeps_one_shared_matrix_and_every_size():
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(tiny_config()).eval()
    before = AaynForConditionalGeneration(tiny_config()).eval()
    before.load_state_dict(model.state_dict())
    model.resize_token_embeddings(41)
    config = model.config
    assert (config.vocab_size, config.decoder_vocab_size) == (41, 41)
    shared = model.model.shared.weight
    assert shared.shape == (41, 32)
    for weight in (model.model.encoder.embed.embed_tokens.weight, model.model.decoder.embed.embed_tokens.weight):
        assert weight is shared
    assert model.lm_head.weight.data_ptr() == shared.data_ptr()
    AaynConfig.from_dict(config.to_dict())  # still a valid config
    source, mask = random_batch(2, 6, 40, [6, 3])
    target, _ = random_batch(2, 5, 40)
    with torch.no_grad():  # the old tokens' rows and everything else are unchanged: the same hidden states
        new = model.model(input_ids=source, attention_mask=mask, decoder_input_ids=target).last_hidden_state
        old = before.model(input_ids=source, attention_mask=mask, decoder_input_ids=target).last_hidden_state
        logits = model(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
    torch.testing.assert_close(new, old, rtol=0, atol=0)
    assert logits.shape[-1] == 41
    for paper_decoding in (True, False):
        out = model.generate(source, attention_mask=mask, max_new_tokens=5, paper_decoding=paper_decoding)
        assert out.shape[0] == 2
    model.resize_token_embeddings(41, pad_to_multiple_of=16)
    assert (model.config.vocab_size, model.config.decoder_vocab_size, model.lm_head.weight.shape[0]) == (48, 48, 48)


def test_separate_vocabularies_resize_each_side():
    config = tiny_config(share_encoder_decoder_embeddings=False, decoder_vocab_size=30, tie_word_embeddings=True)
    model = AaynForConditionalGeneration(config).eval()
    model.resize_token_embeddings(50)
    assert (model.config.vocab_size, model.config.decoder_vocab_size) == (50, 30)
    assert model.model.encoder.embed.embed_tokens.weight.shape[0] == 50
    assert model.lm_head.weight.shape[0] == 30
    model.resize_decoder_token_embeddings(35)
    assert model.config.decoder_vocab_size == 35
    assert model.lm_head.weight is model.model.decoder.embed.embed_tokens.weight
    AaynConfig.from_dict(model.config.to_dict())
    source, mask = random_batch(2, 6, 50, [6, 3])
    assert model.generate(source, attention_mask=mask, max_new_tokens=4).max() < 35
    with pytest.raises(ValueError, match="use resize_token_embeddings"):
        AaynForConditionalGeneration(tiny_config()).resize_decoder_token_embeddings(50)


USE = """
import json, sys, torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
path = sys.argv[1]
model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
assert "aayn" not in sys.modules
batch = tokenizer(["<2fr> six one eight", "<2fr> two"], return_tensors="pt", padding=True)
print(json.dumps({"ids": batch["input_ids"].tolist(), "vocab": model.config.vocab_size,
                  "generated": model.generate(**batch, num_beams=2, max_new_tokens=6).tolist()}))
"""


def loaded_elsewhere(python: str, folder) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(folder.parent / f"modules-{abs(hash(python))}"))
    result = subprocess.run([python, "-c", USE, str(folder)], capture_output=True, text=True, env=env, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_target_language_tag_fine_tuned_saved_and_loaded_without_aayn(saved, tmp_path):
    """Add a tag token, fine-tune a step on sentences that carry it, translate with it; the saved folder gives the
    same ids and translations in processes that never import aayn."""
    folder, _, tokenizer = saved
    model = AaynForConditionalGeneration.from_pretrained(folder)
    tokenizer = type(tokenizer).from_pretrained(folder)
    tokenizer.add_tokens(["<2fr>"], special_tokens=True)
    model.resize_token_embeddings(len(tokenizer))
    tag = tokenizer.convert_tokens_to_ids("<2fr>")
    assert tag == model.config.vocab_size - 1
    batch = tokenizer(["<2fr> six one eight", "<2fr> two"], text_target=["six un huit", "deux"], return_tensors="pt",
                      padding=True)  # fmt: skip
    assert (batch["input_ids"][:, 0] == tag).all()
    batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss = model(**batch).loss
    loss.backward()
    assert model.model.shared.weight.grad[tag].abs().sum() > 0  # the new row learns
    optimizer.step()
    model.eval()
    generated = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=2,
                               max_new_tokens=6)  # fmt: skip
    model.save_pretrained(tmp_path / "tagged")
    save_tokenizer(tokenizer, tmp_path / "tagged")  # a tokenizer_config.json both lines load
    pythons = [sys.executable] + ([os.environ["AAYN_OTHER_PYTHON"]] if os.environ.get("AAYN_OTHER_PYTHON") else [])
    for python in pythons:
        theirs = loaded_elsewhere(python, tmp_path / "tagged")
        assert theirs["vocab"] == model.config.vocab_size
        assert theirs["ids"] == batch["input_ids"].tolist()
        assert theirs["generated"] == generated.tolist(), python


@pytest.mark.parametrize("model_class", [AaynForConditionalGeneration, AaynModel])
def test_resizing_separate_vocabularies_keeps_transformers_bookkeeping(model_class):
    """What transformers' own `resize_token_embeddings` leaves: the config's and the model's `vocab_size`, and the
    ties renewed; the target side keeps its size."""
    config = tiny_config(share_encoder_decoder_embeddings=False, decoder_vocab_size=30)
    model = model_class(config)
    model.resize_token_embeddings(45)
    assert (model.vocab_size, model.config.vocab_size, model.config.decoder_vocab_size) == (45, 45, 30)
    assert model.get_input_embeddings().weight.shape == (45, 32)
    if model_class is AaynForConditionalGeneration:
        assert model.lm_head.weight is model.model.decoder.embed.embed_tokens.weight
    model.resize_decoder_token_embeddings(33)
    assert model.config.decoder_vocab_size == 33
    assert model.get_decoder().get_input_embeddings().weight.shape == (33, 32)
    AaynConfig.from_dict(model.config.to_dict())


def test_resizing_the_bare_model_keeps_one_shared_matrix():
    model = AaynModel(tiny_config())
    model.resize_token_embeddings(47)
    assert (model.config.vocab_size, model.config.decoder_vocab_size) == (47, 47)
    for stack in (model.encoder, model.decoder):
        assert stack.embed.embed_tokens.weight is model.shared.weight
    AaynConfig.from_dict(model.config.to_dict())
