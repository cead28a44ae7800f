"""The loss the Trainer optimizes is the token mean over the whole optimizer step (fairseq's normalization),
whatever the gradient accumulation and the number of processes, with and without label smoothing: checked
against transformers' `LabelSmoother` on the full batch's logits, through transformers' own Seq2SeqTrainer in
processes that load the folder as remote code."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from training_helpers import EIGHT_PAIRS
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq
from transformers.trainer_pt_utils import LabelSmoother

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)

SCRIPT = Path(__file__).parent / "scripts" / "trainer_gradients.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SMOOTHINGS = (0.0, 0.1)
# (sentences per process and micro-batch, accumulation steps, processes): 8 sentences per optimizer step
SETTINGS = [(8, 1, 1), (4, 2, 1), (2, 4, 1), (4, 1, 2)]


def trainer_steps(folder, out, settings: list[tuple[float, int, int]], processes: int) -> None:
    """One process (or one torchrun of `processes`) steps the Trainer once per (smoothing, batch, accumulation)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port", str(free_port())]
    listed = ",".join(f"{smoothing}:{batch}:{accumulation}" for smoothing, batch, accumulation in settings)
    command = [sys.executable, *(launcher if processes > 1 else []), str(SCRIPT), str(folder), str(out), listed]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def stepped(saved, tmp_path_factory):
    """Every setting's loss and gradients, from one process for the single-process settings and one torchrun for
    the two-process ones (a process costs seconds of imports)."""
    folder, out = saved[0], tmp_path_factory.mktemp("steps")
    for processes in (1, 2):
        wanted = [(smoothing, b, a) for smoothing in SMOOTHINGS for b, a, p in SETTINGS if p == processes]
        trainer_steps(folder, out, wanted, processes)
    results = {}
    for smoothing in SMOOTHINGS:
        for batch, accumulation, processes in SETTINGS:
            where = out / f"{smoothing}-{batch}-{accumulation}"
            loss = json.loads((where / "loss.json").read_text())
            results[smoothing, batch, accumulation, processes] = loss, load_file(where / "gradients.safetensors")
    return results


def reference(folder, smoothing):
    """Loss and gradients of the whole 8-sentence batch at once: transformers' LabelSmoother on full logits."""
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    features = [tokenizer(source, text_target=target) for source, target in EIGHT_PAIRS]
    batch = DataCollatorForSeq2Seq(tokenizer, model=model)(features)
    labels = batch.pop("labels")
    model.train()
    outputs = model(**batch)
    loss = LabelSmoother(epsilon=smoothing)(outputs, labels)
    loss.backward()
    return loss.item(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_gradient_accumulation_and_processes_leave_loss_and_gradients_unchanged(saved, stepped, smoothing):
    expected_loss, expected = reference(saved[0], smoothing)
    for batch, accumulation, processes in SETTINGS:
        loss, gradients = stepped[smoothing, batch, accumulation, processes]
        assert loss["processes"] == processes
        assert loss["loss"] == pytest.approx(expected_loss, rel=1e-5), (batch, accumulation, processes)
        assert gradients.keys() == expected.keys()
        for name, gradient in gradients.items():
            torch.testing.assert_close(
                gradient, expected[name], rtol=1e-4, atol=1e-6, msg=f"{name} {batch, accumulation, processes}"
            )


def unfused_reference(model, ids, mask, labels, epsilon):
    """transformers' LabelSmoother on the full logits of the output layer."""
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels=labels)
    outputs = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids)
    return LabelSmoother(epsilon=epsilon)(outputs, labels)


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("chunk_rows", [None, 5])  # the default (one chunk here); chunks of 5 rows
@pytest.mark.parametrize("selected", [True, False])  # unlabelled rows selected out (CPU), or weighted 0 (elsewhere)
def test_the_fused_training_loss_and_every_gradient_equal_the_unfused_reference(
    epsilon, padded, chunk_rows, selected, monkeypatch
):
    from tiny_models import random_batch, tiny_config

    from aayn import AaynForConditionalGeneration

    if not selected:
        monkeypatch.setattr("aayn.model.ops_aayn.reads_are_free", lambda tensor: False)
    if chunk_rows is not None:
        monkeypatch.setattr("aayn.model.ops_aayn.fused_loss_chunk_rows", lambda vocab, d_model: chunk_rows)
    model = AaynForConditionalGeneration(tiny_config(label_smoothing=epsilon)).train()
    ids, mask = random_batch(4, 9, 40, [9, 5, 7, 2] if padded else None)
    labels, label_mask = random_batch(4, 7, 40, [7, 3, 6, 1] if padded else None)
    labels = labels.masked_fill(label_mask == 0, -100)
    output = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert output.logits is None  # never materialized in training
    output.loss.backward()
    fused = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    reference = unfused_reference(model, ids, mask, labels, epsilon)
    reference.backward()
    torch.testing.assert_close(output.loss, reference, rtol=1e-5, atol=1e-6)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(fused[name], parameter.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("chunk_rows", [None, 3])  # one chunk; chunks of 3 rows, the last one shorter (10 rows)
def test_logits_come_back_where_asked_and_under_bf16_autocast_the_fused_loss_stays_close(chunk_rows, monkeypatch):
    from tiny_models import random_batch, tiny_config

    from aayn import AaynForConditionalGeneration

    if chunk_rows is not None:
        monkeypatch.setattr("aayn.model.ops_aayn.fused_loss_chunk_rows", lambda vocab, d_model: chunk_rows)

    model = AaynForConditionalGeneration(tiny_config(label_smoothing=0.1)).train()
    ids, mask = random_batch(2, 6, 40, [6, 4])
    labels, _ = random_batch(2, 5, 40)
    assert model(input_ids=ids, attention_mask=mask, labels=labels, return_logits=True).logits.shape == (2, 5, 40)
    with torch.no_grad():
        assert model(input_ids=ids, attention_mask=mask, labels=labels).logits is not None  # evaluation
    model.apply(lambda module: setattr(module, "p", 0.0) if isinstance(module, torch.nn.Dropout) else None)

    def loss_and_gradients(loss_of):  # without dropout: the same function in both, so gradients can be compared
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_of()
        loss.backward()
        gradients = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}
        model.zero_grad()
        return loss, gradients

    fused, gradients = loss_and_gradients(lambda: model(input_ids=ids, attention_mask=mask, labels=labels).loss)
    reference, expected = loss_and_gradients(lambda: unfused_reference(model, ids, mask, labels, 0.1))
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, reference.float(), atol=2e-2, rtol=0)
    for name, gradient in expected.items():  # bfloat16 products on both sides: close, not equal
        assert (gradients[name] - gradient).norm() <= 0.02 * gradient.norm() + 1e-6, name
