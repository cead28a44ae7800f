"""`aayn train --bf16_weights true`: bf16 weights with float32 master weights (fairseq's --bf16), checked against
fairseq's step written out plainly, through checkpoints, a resume and the final folder."""

import copy
import json

import pytest
import torch
from safetensors.torch import load_file
from training_helpers import FAST, tiny_recipe, write_numbers_corpus, write_recipe

from aayn.model.modeling_aayn import AaynForConditionalGeneration
from aayn.training import parse_arguments, run
from aayn.training.model import configure_model

pytestmark = pytest.mark.both_lines  # the Trainer's step and its checkpoints differ between the lines


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_numbers_corpus(tmp_path_factory.mktemp("numbers"))


def parsed(corpus, folder, **overrides):
    recipe = tiny_recipe(corpus, folder, **{**FAST, **overrides}, dropout=0.0, bf16=True, bf16_weights=True)
    return parse_arguments([str(write_recipe(folder.parent / f"{folder.name}.yaml", recipe))])


class Recorded:
    """The training forwards' inputs, losses and the state they ran in, and the model as the Trainer got it."""

    def __init__(self, monkeypatch):
        self.calls, self.initial = [], None
        forward = AaynForConditionalGeneration.forward

        def recording(model, *args, **kwargs):
            output = forward(model, *args, **kwargs)
            if model.training:
                state = (next(model.parameters()).dtype, torch.is_autocast_enabled("cpu"))
                self.calls.append(({k: v.clone() if torch.is_tensor(v) else v for k, v in kwargs.items()},
                                   output.loss.detach().clone(), state))  # fmt: skip
            return output

        monkeypatch.setattr(AaynForConditionalGeneration, "forward", recording)

        def configured(model, plan):  # the model as the Trainer gets it
            configure_model(model, plan)
            self.initial = copy.deepcopy(model)

        monkeypatch.setattr("aayn.training.job.configure_model", configured)


def test_bf16_weights_train_as_fairseqs_bf16_step(corpus, tmp_path, monkeypatch, capsys):
    """Every step of `aayn train` with bf16_weights (2 micro-batches a step, clipping at 1, Adam): the forward runs
    on bf16 weights without autocast, and its losses and the final weights are those of fairseq's --bf16 step
    written out here: the batches' bf16 gradients accumulated, clipped, copied into float32 master weights, which
    a plain (for-loop) Adam updates and which are rounded back into the bf16 model."""
    recorded = Recorded(monkeypatch)
    master_grads = []  # per optimizer step: the norms of the gradients the optimizer updates the masters by

    inside = []  # the steps under way: torch's AdamW may call Adam's, both wrapped, and a step counts once

    def recording(step):
        def stepped(optimizer, *args, **kwargs):
            if not inside:
                grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
                assert {grad.dtype for grad in grads} == {torch.float32}
                master_grads.append(sorted(grad.norm().item() for grad in grads))
            inside.append(step)
            try:
                return step(optimizer, *args, **kwargs)
            finally:
                inside.pop()

        return stepped

    for kind in (torch.optim.Adam, torch.optim.AdamW):  # each class's own attribute, which monkeypatch restores
        monkeypatch.setattr(kind, "step", recording(kind.step))
    steps = dict(gradient_accumulation_steps=2, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0)
    batches = dict(max_tokens=160, max_source_length=32, max_target_length=32)  # 8 micro-batches in one epoch
    model_args, data_args, args = parsed(corpus, tmp_path / "out", **steps, **batches, save_steps=4, do_predict=False)
    assert "bf16_weights: the weights in bfloat16" in capsys.readouterr().out
    assert model_args.bf16_weights and not args.bf16  # the Trainer's autocast is off
    run(model_args, data_args, args)
    assert len(recorded.calls) == 8 and {state for *_, state in recorded.calls} == {(torch.bfloat16, False)}
    assert len(master_grads) == 4

    reference = recorded.initial.train()
    masters = [param.detach().clone() for param in reference.parameters()]
    reference.to(torch.bfloat16)
    adam = torch.optim.AdamW(masters, lr=3e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0, foreach=False)
    for step in range(4):
        for inputs, loss, _ in recorded.calls[2 * step : 2 * step + 2]:
            ours = reference(**inputs).loss
            torch.testing.assert_close(ours, loss, rtol=0, atol=0)  # the same bf16 weights, bit for bit
            ours.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        for master, param in zip(masters, reference.parameters()):
            master.grad = param.grad.float()
        # the masters' gradients themselves (Adam and clipping would hide a scale on them in the weights)
        expected = sorted(master.grad.norm().item() for master in masters)
        torch.testing.assert_close(master_grads[step], expected, rtol=1e-5, atol=1e-8)
        adam.step()
        with torch.no_grad():
            for master, param in zip(masters, reference.parameters()):
                param.copy_(master)
        reference.zero_grad(set_to_none=True)
    saved = load_file(tmp_path / "out" / "model.safetensors")
    for (name, param), master in zip(reference.named_parameters(), masters):
        key = name if name in saved else "model.shared.weight"  # the tied matrix is saved once
        assert saved[key].dtype == torch.float32
        # fused and for-loop Adam round differently, a float32 ulp or so; a bf16 rounding is ~1000x larger
        torch.testing.assert_close(saved[key], master, rtol=1e-6, atol=1e-7, msg=name)
    assert any(not torch.equal(weight, weight.bfloat16().float()) for weight in saved.values())


def test_bf16_weights_checkpoints_hold_the_masters_and_a_resume_continues_exactly(corpus, tmp_path):
    """Checkpoints and the final folder hold the float32 master weights (the config says float32); a run resumed
    from a checkpoint (masters read from it, Adam's state too) ends on the uninterrupted run's weights, bit for bit,
    averaging included; the losses stay within bf16's tolerance of bf16 autocast's over the same steps."""
    whole = tmp_path / "whole"
    run(*parsed(corpus, whole, average_last_checkpoints=2, logging_steps=1))
    config = json.loads((whole / "checkpoint-2" / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "float32"
    resumed = tmp_path / "resumed"
    run(*parsed(corpus, resumed, average_last_checkpoints=2, resume_from_checkpoint=str(whole / "checkpoint-2")))
    final, again = load_file(whole / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert final.keys() == again.keys() and all(torch.equal(final[key], again[key]) for key in final)
    step_4 = load_file(whole / "checkpoint-4" / "model.safetensors")
    assert any(not torch.equal(weight, weight.bfloat16().float()) for weight in step_4.values())

    autocast = tmp_path / "autocast"
    recipe = tiny_recipe(corpus, autocast, **FAST, dropout=0.0, bf16=True, logging_steps=1, do_predict=False)
    run(*parse_arguments([str(write_recipe(tmp_path / "autocast.yaml", recipe))]))
    losses = {
        arm: [entry["loss"] for entry in json.loads((folder / "checkpoint-4" / "trainer_state.json").read_text())
              ["log_history"] if "loss" in entry]
        for arm, folder in (("weights", whole), ("autocast", autocast))
    }  # fmt: skip
    assert len(losses["weights"]) == 4
    torch.testing.assert_close(losses["weights"], losses["autocast"], rtol=2e-2, atol=0)


@pytest.mark.parametrize("bf16", ["false", "auto"])
def test_bf16_weights_without_bf16_are_said_unused(corpus, tmp_path, bf16, monkeypatch, capsys):
    monkeypatch.setattr("aayn.training.arguments.bf16_matmuls", lambda use_cpu: (False, "this CPU (test)"))
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", bf16_weights=True))
    model_args, _, args = parse_arguments([str(recipe), "--bf16", bf16])
    assert "bf16_weights is not used: bf16 is false" in capsys.readouterr().out
    assert not model_args.bf16_weights and not args.bf16


def test_bf16_weights_under_fsdp_are_refused_before_any_work(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ValueError, match="bf16_weights casts the whole model in one process"):
        run(*parsed(corpus, tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_bf16_weights_load_the_best_checkpoint_at_the_end_in_float32(corpus, tmp_path):
    """`load_best_model_at_end` (here the checkpoint of the highest validation loss, the first): the final folder
    holds that checkpoint's float32 weights exactly, not the last step's nor their bf16 rounding."""
    folder = tmp_path / "out"
    best = dict(eval_strategy="steps", eval_steps=2, load_best_model_at_end=True, metric_for_best_model="loss",
                greater_is_better=True, predict_with_generate=False, do_predict=False)  # fmt: skip
    run(*parsed(corpus, folder, **best))
    final, first = load_file(folder / "model.safetensors"), load_file(folder / "checkpoint-2" / "model.safetensors")
    assert all(torch.equal(final[key], first[key]) for key in first)
    last = load_file(folder / "checkpoint-4" / "model.safetensors")
    assert not all(torch.equal(final[key], last[key]) for key in last)


def test_bf16_weights_with_an_optimizer_of_ones_own_are_refused(tmp_path):
    from transformers import Seq2SeqTrainingArguments

    from aayn import AaynConfig
    from aayn.training import AaynTrainer

    model = AaynForConditionalGeneration(AaynConfig(d_model=16, encoder_layers=1, decoder_layers=1, vocab_size=32,
                                                    encoder_attention_heads=2, decoder_attention_heads=2,
                                                    encoder_ffn_dim=32, decoder_ffn_dim=32))  # fmt: skip
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    optimizer = torch.optim.Adam(model.parameters())
    with pytest.raises(ValueError, match="an optimizer given in `optimizers` would update the bf16 weights"):
        AaynTrainer(model=model, args=args, optimizers=(optimizer, None), bf16_weights=True)
