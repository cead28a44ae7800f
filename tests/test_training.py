"""aayn train: the paper's recipe on Seq2SeqTrainer, a hub-ready output, and the errors a user can make."""

import json
import os
import subprocess
import sys

import pytest
import sacrebleu
import torch
import yaml
from host_reads import HostReads, on_an_accelerator
from safetensors.torch import load_file
from training_helpers import FAST, FOLDER_FILES, tiny_recipe, write_numbers_corpus, write_recipe
from transformers import AutoTokenizer, GenerationConfig, Seq2SeqTrainer

from aayn import AaynConfig
from aayn.cli import main as aayn
from aayn.training import AaynTrainer, TrainingDiverged, parse_arguments, run
from aayn.training.trainer import METRICS_MODULE

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_numbers_corpus(tmp_path_factory.mktemp("numbers"))


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """One tiny `aayn train` run shared by the tests that inspect its output."""
    output = tmp_path_factory.mktemp("run") / "out"
    recipe = write_recipe(output.parent / "recipe.yaml", tiny_recipe(corpus, output))
    assert aayn(["train", str(recipe)]) == 0
    return output


def test_output_folder_is_hub_ready(trained):
    names = {path.name for path in trained.iterdir()}
    assert (
        FOLDER_FILES
        | {
            "generation_config.json",
            "all_results.json",
            "README.md",
            "training_curves.png",
            "runs",
        }
        <= names
    )
    config = json.loads((trained / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_aayn.AaynForConditionalGeneration"
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_aayn.AaynTranslationPipeline"
    results = json.loads((trained / "all_results.json").read_text())
    assert {"test_bleu", "test_chrf", "train_loss"} <= set(results)
    card = (trained / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["language"] == ["en", "fr"] and meta["pipeline_tag"] == "translation"
    assert meta["library_name"] == "transformers" and "translation" in meta["tags"] and meta["license"]
    scores = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert scores == {"bleu": round(results["test_bleu"], 2), "chrf": round(results["test_chrf"], 2)}
    assert "trained from scratch with `aayn train`" in card and "nrefs:1|case:mixed" in card
    assert list((trained / "runs").rglob("events.out.tfevents.*"))  # TensorBoard logs
    for checkpoint in ("checkpoint-4", "checkpoint-8"):  # every checkpoint is a complete model folder too
        assert {"model.safetensors", "config.json", "modeling_aayn.py", "tokenizer.json", "README.md"} <= {
            path.name for path in (trained / checkpoint).iterdir()
        }


def test_output_folder_loads_in_a_fresh_process_without_aayn(trained):
    script = f"""
import sys
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig, pipeline
path = {str(trained)!r}
config = AutoConfig.from_pretrained(path, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)
generation = GenerationConfig.from_pretrained(path)
out = model.generate(**tokenizer(["Six one."], return_tensors="pt"), max_new_tokens=8)
translated = pipeline("translation", model=path, trust_remote_code=True)("Six one.", max_new_tokens=8)
assert translated[0]["translation_text"] == tokenizer.decode(out[0], skip_special_tokens=True).strip()
assert "aayn" not in sys.modules and type(model).__name__ == "AaynForConditionalGeneration"
print(config.model_type, generation.num_beams, out.shape[0])
"""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=trained.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1].split() == ["aayn", "2", "1"]


def test_max_tokens_batches_in_the_trainer(corpus, tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path, eval_strategy="no"))
    model_args, data_args, args = parse_arguments([recipe.as_posix()])
    from transformers import DataCollatorForSeq2Seq

    from aayn.data import load_translation_dataset, tokenize_dataset, train_tokenizer
    from aayn.training.model import build_model
    from aayn.training.plan import plan_run

    data = load_translation_dataset(str(corpus), source_lang="en", target_lang="fr")
    tokenizer = train_tokenizer(data["train"], source_lang="en", target_lang="fr", vocab_size=300, show_progress=False)
    train = tokenize_dataset(data["train"], tokenizer, source_lang="en", target_lang="fr")
    model = build_model(plan_run(model_args, data_args, args), tokenizer)
    trainer = AaynTrainer(
        model=model,
        args=args,
        train_dataset=train,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        max_tokens=100,
    )
    loader = trainer.get_train_dataloader()
    seen = []
    for batch in loader:
        assert batch["input_ids"].numel() <= 100 and batch["labels"].numel() <= 100
        # the FLOPs counted for the log: transformers' own count, its parameters counted once
        assert trainer.floating_point_ops(batch) == Seq2SeqTrainer.floating_point_ops(trainer, batch) > 0
        seen.extend(tuple(row[row != tokenizer.pad_token_id].tolist()) for row in batch["input_ids"])
    assert sorted(seen) == sorted(tuple(ids) for ids in train["input_ids"])  # each example once per epoch


def test_a_bf16_run_leaves_the_next_run_and_its_subprocesses_the_precision_they_ask(corpus, tmp_path, monkeypatch):
    """A bf16 recipe parsed, its Trainer built, then a float32 one in the same process: the float32 Trainer's
    Accelerator runs no autocast, and the environment a later subprocess inherits (an `accelerate launch`, a test's
    Trainer) holds no ACCELERATE_MIXED_PRECISION, as before the first parse; a launcher's choice stays."""
    from transformers import DataCollatorForSeq2Seq

    from aayn.data import load_translation_dataset, train_tokenizer
    from aayn.training.model import build_model
    from aayn.training.plan import plan_run

    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)  # 4.57's arguments write it, 5.x's do not
    data = load_translation_dataset(str(corpus), source_lang="en", target_lang="fr")
    tokenizer = train_tokenizer(data["train"], source_lang="en", target_lang="fr", vocab_size=300, show_progress=False)
    precisions = []
    for name, precision in (("bf16", {"bf16": True}), ("float32", {})):
        recipe = write_recipe(
            tmp_path / f"{name}.yaml", tiny_recipe(corpus, tmp_path / name, eval_strategy="no", **precision)
        )
        model_args, data_args, args = parse_arguments([recipe.as_posix()])
        assert "ACCELERATE_MIXED_PRECISION" not in os.environ
        model = build_model(plan_run(model_args, data_args, args), tokenizer)
        trainer = AaynTrainer(model=model, args=args, data_collator=DataCollatorForSeq2Seq(tokenizer, model=model))
        precisions.append(trainer.accelerator.mixed_precision)
        assert "ACCELERATE_MIXED_PRECISION" not in os.environ
    assert precisions == ["bf16", "no"]
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # as `accelerate launch --mixed_precision bf16` sets
    parse_arguments([recipe.as_posix()])
    assert os.environ["ACCELERATE_MIXED_PRECISION"] == "bf16"


@pytest.mark.parametrize("every", [1, 100])  # 100: no step logs nor saves; the run's end finds it
def test_diverging_run_stops_with_a_clear_message_and_saves_nothing(corpus, tmp_path, every):
    recipe = tiny_recipe(
        corpus,
        tmp_path / "out",
        learning_rate=1e30,
        warmup_steps=0,
        save_steps=every,
        logging_steps=every,
        max_steps=3,
        eval_strategy="no",
        max_grad_norm=0.0,
    )
    with pytest.raises(TrainingDiverged, match=r"training diverged: the loss is (nan|inf) at step \d+") as error:
        run(*parse_arguments([write_recipe(tmp_path / "r.yaml", recipe).as_posix()]))
    step, out = int(str(error.value).split("at step ")[1].split(".")[0]), tmp_path / "out"
    assert not (out / "model.safetensors").exists()
    assert all(int(folder.name.split("-")[1]) < step for folder in out.glob("checkpoint-*"))  # none from then on


@pytest.mark.parametrize("max_grad_norm, bf16_weights", [(0.0, False), (1.0, False), (1.0, True)])
def test_a_trainer_step_makes_the_host_wait_for_nothing(corpus, tmp_path, monkeypatch, max_grad_norm, bf16_weights):
    """The whole Trainer step on the path it takes on an accelerator, from its first micro-batch's forward to the
    optimizer's and the schedule's steps (gradient accumulation, clipping on and off, bf16 weights with their
    master weights' copies): no aten call that makes the
    host wait for the device (`HostReads`). The loss is read where a step logs, evaluates or saves, after it; a
    divergence is found there (the test above). The batches' fetch comes before a step begins: host work on host
    tensors (counted here, a DataLoader's seed reads one at each epoch's start, which on a GPU waits for nothing)."""
    from transformers import TrainerCallback

    on_an_accelerator(monkeypatch)

    class Steps(TrainerCallback):  # counts from each step's beginning to its end
        def __init__(self):
            self.counter, self.reads = None, {}

        def on_step_begin(self, args, state, control, **kwargs):
            self.counter = HostReads()
            self.counter.__enter__()

        def on_step_end(self, args, state, control, **kwargs):
            self.counter.__exit__(None, None, None)
            self.reads[state.global_step] = self.counter.reads

    steps = Steps()
    recipe = tiny_recipe(corpus, tmp_path / "out", max_steps=4, gradient_accumulation_steps=2, eval_strategy="no")
    recipe.update(max_grad_norm=max_grad_norm, predict_with_generate=False, save_steps=4)
    if bf16_weights:
        recipe.update(bf16=True, bf16_weights=True)
    model_args, data_args, args = parse_arguments([write_recipe(tmp_path / "r.yaml", recipe).as_posix()])
    run(model_args, data_args, args, callbacks=[steps])
    assert steps.reads == {1: [], 2: [], 3: [], 4: []}


def test_the_logged_gradient_norm_is_the_logging_steps_own_and_only_they_compute_one(corpus, tmp_path, monkeypatch):
    """AaynTrainer skips transformers 5.x's per-step norm (clipping off) except where the step logs: the log must
    still hold, at every logging step, the norm of that step's gradients as torch computes it from them."""
    import transformers
    from transformers import TrainerCallback

    class Norms(TrainerCallback):  # the gradients' norm at every step, just before the optimizer uses them
        def __init__(self):
            self.norms = {}

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            grads = [p.grad.norm() for p in model.parameters() if p.grad is not None]
            self.norms[state.global_step + 1] = torch.stack(grads).norm().item()

    norms, computed = Norms(), []
    recipe = tiny_recipe(corpus, tmp_path / "out", max_steps=7, logging_steps=3, eval_strategy="no", max_grad_norm=0)
    recipe.update(predict_with_generate=False, average_last_checkpoints=0, save_steps=7)
    original = getattr(transformers.Trainer, "_get_grad_norm", None)
    if original is not None:  # 5.x: count the norms it computes

        def counting(self, model, grad_norm=None):
            computed.append(self.state.global_step + 1)
            return original(self, model, grad_norm)

        monkeypatch.setattr(transformers.Trainer, "_get_grad_norm", counting)
    run(*parse_arguments([write_recipe(tmp_path / "r.yaml", recipe).as_posix()]), callbacks=[norms])
    history = json.loads((tmp_path / "out" / "checkpoint-7" / "trainer_state.json").read_text())["log_history"]
    logged = {entry["step"]: entry["grad_norm"] for entry in history if "grad_norm" in entry}
    assert sorted(norms.norms) == list(range(1, 8))
    if original is None:  # 4.57 logs no norm without clipping
        assert logged == {}
        return
    assert computed == [3, 6] and sorted(logged) == [3, 6]
    for step, value in logged.items():
        assert value == pytest.approx(norms.norms[step], rel=1e-5)


def test_metrics_module_equals_sacrebleu():
    import evaluate

    hypotheses = ["The cat sat on the mat.", "A dog barked loudly at night", "Hello"]
    references = ["The cat sat on the mat.", "The dog barked at night.", "Hello there!"]
    scores = evaluate.load(METRICS_MODULE).compute(predictions=hypotheses, references=references)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a") and scores["sentences"] == 3


def test_aayn_evaluate_prints_bleu_of_the_models_translations(trained, corpus, capsys, tmp_path):
    assert (
        aayn(
            [
                "evaluate",
                "--output",
                str(tmp_path / "hypotheses.txt"),
                "--model",
                str(trained),
                "--dataset_name",
                str(corpus),
                "--source_lang",
                "en",
                "--target_lang",
                "fr",
                "--split",
                "test",
                "--max_samples",
                "8",
                "--num_beams",
                "2",
                "--length_penalty",
                "1.0",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert (
        set(printed) == {"bleu", "chrf", "bleu_signature", "chrf_signature", "sentences"} and printed["sentences"] == 8
    )
    from transformers import AutoModelForSeq2SeqLM

    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(trained), AutoTokenizer.from_pretrained(trained)
    sources = (corpus / "test.en").read_text().splitlines()[:8]
    references = (corpus / "test.fr").read_text().splitlines()[:8]
    outputs = [
        tokenizer.decode(
            model.generate(**tokenizer([s], return_tensors="pt"), num_beams=2, length_penalty=1.0)[0],
            skip_special_tokens=True,
        ).strip()
        for s in sources
    ]
    assert printed["bleu"] == pytest.approx(sacrebleu.corpus_bleu(outputs, [references]).score)
    assert (tmp_path / "hypotheses.txt").read_text(encoding="utf-8").splitlines() == outputs  # --output


def test_evaluating_the_other_direction_is_one_line_unless_insisted(trained, corpus, capsys, caplog):
    """An en->fr model scored on fr->en data is refused in one line naming the direction its card records;
    `--any_direction` scores it with a warning."""
    flags = ["evaluate", "--model", str(trained), "--dataset_name", str(corpus), "--split", "test"]
    flags += ["--max_samples", "2", "--num_beams", "1", "--source_lang", "fr", "--target_lang", "en"]
    assert aayn(flags) == 2
    error = capsys.readouterr().err.splitlines()[0]
    assert "translates en->fr (its model card)" in error and "--source_lang en --target_lang fr" in error
    with caplog.at_level("WARNING", logger="aayn"):
        assert aayn([*flags, "--any_direction"]) == 0
    assert "translates en->fr" in caplog.text and json.loads(capsys.readouterr().out)["sentences"] == 2


def test_aayn_average_writes_the_mean_of_the_checkpoints_as_a_complete_folder(trained, tmp_path, capsys):
    checkpoints = [trained / "checkpoint-4", trained / "checkpoint-8"]
    output = tmp_path / "averaged"
    assert aayn(["average", "--output_dir", str(output), *map(str, checkpoints)]) == 0
    weights = [load_file(c / "model.safetensors") for c in checkpoints]
    averaged = load_file(output / "model.safetensors")
    assert averaged.keys() == weights[0].keys()
    for name, value in averaged.items():
        torch.testing.assert_close(value, (weights[0][name] + weights[1][name]) / 2, rtol=0, atol=1e-7)
    assert {"config.json", "modeling_aayn.py", "tokenizer.json", "generation_config.json", "README.md"} <= {
        p.name for p in output.iterdir()
    }
    assert "Average of the weights of 2 checkpoints" in (output / "README.md").read_text()
    from transformers import AutoModelForSeq2SeqLM

    assert AutoModelForSeq2SeqLM.from_pretrained(output).config.model_type == "aayn"


def test_aayn_average_errors(trained, tmp_path):
    from aayn.training import average_checkpoints

    with pytest.raises(FileNotFoundError, match=r"checkpoint .*nowhere has no model.safetensors"):
        average_checkpoints([trained / "checkpoint-4", tmp_path / "nowhere"], tmp_path / "a")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        average_checkpoints([trained / "checkpoint-4"], tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    other = tmp_path / "other"
    from aayn import AaynConfig, AaynForConditionalGeneration

    AaynForConditionalGeneration(
        AaynConfig(
            vocab_size=300,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
        )
    ).save_pretrained(other)
    AutoTokenizer.from_pretrained(trained).save_pretrained(other)
    with pytest.raises(
        ValueError, match=r"feed_forward\.fc\d\.(weight|bias) is \(32(, 32)?,?\) in .*other but \(.*64.*\) in"
    ):
        average_checkpoints([trained / "checkpoint-4", other], tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_fine_tuning_from_a_saved_model(trained, corpus, tmp_path):
    recipe = tiny_recipe(
        corpus,
        tmp_path / "tuned",
        model_name_or_path=str(trained),
        max_steps=2,
        eval_strategy="no",
        generation_num_beams=1,
    )  # greedy evaluation: the saved generation config must stay valid
    metrics = run(*parse_arguments([write_recipe(tmp_path / "r.yaml", recipe).as_posix()]))
    assert "test_bleu" in metrics
    assert GenerationConfig.from_pretrained(tmp_path / "tuned").num_beams == 1
    assert (tmp_path / "tuned" / "tokenizer.json").read_text() == (trained / "tokenizer.json").read_text()
    assert not (tmp_path / "tuned" / "tokenizer").exists()  # the model's tokenizer, not a new one
    assert "fine-tuned from" in (tmp_path / "tuned" / "README.md").read_text()


def test_fine_tuning_applies_dropout_and_refuses_a_new_shape(trained, corpus, tmp_path, capsys):
    """Fine-tuning takes `--dropout 0.3` into the model, and refuses a new shape (`--d_model 64`) by name. The recipe
    repeats the model's shape (accepted: equal values); the dropout flags land in the saved config and in the
    modules that train."""
    recipe = tiny_recipe(corpus, tmp_path / "tuned", **FAST, model_name_or_path=str(trained))
    path = write_recipe(tmp_path / "r.yaml", recipe).as_posix()
    assert aayn(["train", path, "--d_model", "64"]) == 2
    error = capsys.readouterr().err.splitlines()[0]
    assert "--d_model 64" in error and "has d_model 32" in error
    assert not (tmp_path / "tuned").exists()
    flags = ["--dropout", "0.3", "--attention_dropout", "0.2", "--activation_dropout", "0.05"]
    model_args, data_args, args = parse_arguments([path, *flags])
    seen = {}
    monkeypatch = pytest.MonkeyPatch()
    original = AaynTrainer.train
    monkeypatch.setattr(AaynTrainer, "train", lambda self, **kw: seen.update(model=self.model) or original(self, **kw))
    try:
        run(model_args, data_args, args)
    finally:
        monkeypatch.undo()
    saved = AaynConfig.from_pretrained(tmp_path / "tuned")
    assert (saved.dropout, saved.attention_dropout, saved.activation_dropout) == (0.3, 0.2, 0.05)
    rates = {module.p for module in seen["model"].modules() if isinstance(module, torch.nn.Dropout)}
    assert 0.3 in rates and 0.1 not in rates
    assert AaynConfig.from_pretrained(trained).dropout == 0.1  # the start is untouched


PLAIN_TRANSFORMERS_SCRIPT = """
import sys
from datasets import load_dataset
from transformers import (AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainer,
                          Seq2SeqTrainingArguments)

checkpoint, data, output = sys.argv[1:]
model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)
raw = load_dataset("text", data_files={"en": f"{data}/train.en", "fr": f"{data}/train.fr"})
pairs = [{"en": e["text"], "fr": f["text"]} for e, f in zip(raw["en"], raw["fr"])][:64]

def encode(row):
    return tokenizer(row["en"], text_target=row["fr"])

from datasets import Dataset
dataset = Dataset.from_list(pairs).map(encode, remove_columns=["en", "fr"])
args = Seq2SeqTrainingArguments(output, max_steps=3, per_device_train_batch_size=8, predict_with_generate=True,
                                report_to=[], use_cpu=True, save_strategy="no", generation_max_length=16)
trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=dataset, eval_dataset=dataset.select(range(8)),
                         processing_class=tokenizer, data_collator=DataCollatorForSeq2Seq(tokenizer, model=model))
trainer.train()
predictions = trainer.predict(dataset.select(range(4))).predictions
trainer.save_model(f"{output}/tuned")  # a folder saved through the remote code must be complete
from transformers import pipeline
translate = pipeline("translation", model=f"{output}/tuned", trust_remote_code=True)
assert type(translate).__name__ == "AaynTranslationPipeline" and len(translate("Six one.", max_new_tokens=4)) == 1
assert "aayn" not in sys.modules
print(tokenizer.batch_decode(predictions.clip(min=0), skip_special_tokens=True))
"""


def test_the_plain_transformers_route_needs_no_aayn_glue(trained, corpus, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-c", PLAIN_TRANSFORMERS_SCRIPT, str(trained), str(corpus), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(eval(result.stdout.strip().splitlines()[-1])) == 4  # four decoded predictions
    assert {"pipeline_aayn.py", "modeling_aayn.py", "configuration_aayn.py"} <= {
        p.name for p in (tmp_path / "tuned").iterdir()
    }
