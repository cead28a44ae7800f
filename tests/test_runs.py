"""aayn train as users run it: mistakes found before any work is spent, reruns into the same folder, resume
after a kill, help, imports light enough for the command line, the multi-process launch (recipe keys:
test_recipes.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from training_helpers import FAST, tiny_recipe, write_numbers_corpus, write_recipe

from aayn.cli import main as aayn
from aayn.training import parse_arguments, run
from aayn.training.arguments import argument_parser


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_numbers_corpus(tmp_path_factory.mktemp("numbers"))


def test_a_shortened_run_averages_the_checkpoints_it_leaves_and_says_so(corpus, tmp_path, caplog):
    """`aayn train recipes/demo.yaml --max_steps 100` (save_steps 300, average 3) runs: the recipe adapts to the
    two checkpoints 4 steps leave (save_steps 2, limit 2), and the final weights are their average (the weights of
    checkpoint-4 alone would differ)."""
    from safetensors.torch import load_file

    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", **FAST, average_last_checkpoints=3)
    )
    with caplog.at_level("INFO", logger="aayn"):
        run(*parse_arguments([str(recipe)]))
    assert "average_last_checkpoints=3" in caplog.text and "leave 2 checkpoint(s): averaging those 2" in caplog.text
    # the start of a run says what it trains on and what it trains
    from transformers import AutoModelForSeq2SeqLM

    parameters = sum(p.numel() for p in AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").parameters())
    pairs = {split: len((corpus / f"{split}.en").read_text().splitlines()) for split in ("train", "test")}
    assert f"model: aayn, {parameters:,} parameters: 2+2 layers, d_model 32, heads 4, ffn 64" in caplog.text
    assert f"data: train {pairs['train']:,} pairs, test {min(pairs['test'], 4)} pairs" in caplog.text
    final, second, fourth = (
        load_file(folder / "model.safetensors")
        for folder in (tmp_path / "out", tmp_path / "out" / "checkpoint-2", tmp_path / "out" / "checkpoint-4")
    )
    name = next(key for key in final if key.endswith("fc1.weight"))
    torch.testing.assert_close(final[name], (second[name] + fourth[name]) / 2)


@pytest.mark.parametrize("stages", [["--do_predict", "false"], ["--do_eval", "false"]])
def test_stage_flags_are_honoured(corpus, tmp_path, stages):
    """`--do_predict false` skips the test split (not even read), `--do_eval false` every evaluation
    during training; by default a run writes the test translations to generated_predictions.txt."""
    seen = {}
    evaluating = {**FAST, "eval_strategy": "steps", "eval_steps": 2}  # unless do_eval is false
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", **evaluating))
    model_args, data_args, args = parse_arguments([str(recipe), *stages])
    import datasets

    from aayn.data import prepare

    loader = prepare.load_translation_dataset

    def recording(*positional, splits, **kwargs):
        seen.update(splits)
        return loader(*positional, splits=splits, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prepare, "load_translation_dataset", recording)
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # nothing prepared: the data is read
        metrics = run(model_args, data_args, args)
    history = json.loads((tmp_path / "out" / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
    if "--do_predict" in stages:
        assert "test" not in seen and metrics == {} and not (tmp_path / "out" / "generated_predictions.txt").exists()
        assert any("eval_loss" in entry for entry in history)
    else:
        assert "validation" not in seen and not any("eval_loss" in entry for entry in history)
        predictions = (tmp_path / "out" / "generated_predictions.txt").read_text(encoding="utf-8").splitlines()
        assert len(predictions) == FAST["max_predict_samples"] and "test_bleu" in metrics
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_do_train_false_tests_a_given_model_without_writing_one(corpus, tmp_path):
    trained = tmp_path / "trained"
    run(*parse_arguments([str(write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, trained, **FAST)))]))
    recipe = tiny_recipe(corpus, tmp_path / "tested", **FAST, model_name_or_path=str(trained))
    metrics = run(*parse_arguments([str(write_recipe(tmp_path / "t.yaml", recipe)), "--do_train", "false"]))
    assert metrics["test_bleu"] == json.loads((trained / "test_results.json").read_text())["test_bleu"]
    assert (tmp_path / "tested" / "generated_predictions.txt").read_text() == (
        trained / "generated_predictions.txt"
    ).read_text()
    assert not (tmp_path / "tested" / "model.safetensors").exists()


def test_fine_tuning_a_model_that_is_not_aayns_is_refused_before_any_work(corpus, tmp_path, saved):
    """The run's loss, search and card are aayn's: a Marian folder as --model_name_or_path is named in one line."""
    from transformers import MarianConfig, MarianMTModel

    _, _, tokenizer = saved
    shape = dict(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2)
    config = MarianConfig(vocab_size=len(tokenizer), encoder_ffn_dim=16, decoder_ffn_dim=16, **shape,
                          pad_token_id=0, decoder_start_token_id=0, max_position_embeddings=32)  # fmt: skip
    MarianMTModel(config).save_pretrained(tmp_path / "marian")
    tokenizer.save_pretrained(tmp_path / "marian")
    recipe = tiny_recipe(corpus, tmp_path / "out", **FAST, model_name_or_path=str(tmp_path / "marian"))
    with pytest.raises(ValueError, match="is a marian model; aayn train fine-tunes aayn models"):
        run(*parse_arguments([str(write_recipe(tmp_path / "r.yaml", recipe))]))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--do_train", "false"], "do_train false needs --model_name_or_path"),
        (["--do_train", "false", "--do_predict", "false"], "nothing to do"),
    ],
)
def test_stage_flags_that_leave_nothing_to_do_are_one_line(corpus, tmp_path, flags, message, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", **FAST))
    assert aayn(["train", str(recipe), *flags]) == 2
    error = capsys.readouterr().err
    assert message in error.splitlines()[0] and "Traceback (most recent" not in error


def test_evaluation_without_generation_keeps_no_logits(corpus, tmp_path, monkeypatch):
    """The Trainer would gather the full-vocabulary logits of the whole test split for no metric."""
    from aayn.training import AaynTrainer, run

    seen = []
    predict = AaynTrainer.predict

    def recording(self, *args, **kwargs):
        output = predict(self, *args, **kwargs)
        seen.append(output.predictions)
        return output

    monkeypatch.setattr(AaynTrainer, "predict", recording)
    recipe = tiny_recipe(corpus, tmp_path / "out", **FAST, predict_with_generate=False)
    metrics = run(*parse_arguments([write_recipe(tmp_path / "r.yaml", recipe).as_posix()]))
    assert seen == [None] and "test_loss" in metrics


def test_a_rerun_into_the_same_folder_is_refused_resumed_or_started_clean(corpus, tmp_path, capsys):
    """The runs in this process (fresh ones cost seconds of imports each; test_nothing_lost.py runs them so)."""
    run(*parse_arguments([str(write_recipe(tmp_path / "first.yaml", tiny_recipe(corpus, tmp_path / "out", **FAST)))]))
    weights = (tmp_path / "out" / "model.safetensors").read_bytes()
    other_pair = tiny_recipe(corpus, tmp_path / "out", **FAST, source_lang="fr", target_lang="en")
    assert aayn(["train", str(write_recipe(tmp_path / "other.yaml", other_pair))]) == 2  # refused before any work
    refused = capsys.readouterr().err
    assert "holds an earlier run" in refused and "--overwrite_output_dir" in refused
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == weights  # untouched

    clean = write_recipe(tmp_path / "clean.yaml", {**other_pair, "max_steps": 2})
    run(*parse_arguments([str(clean), "--overwrite_output_dir", "true"]))
    assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) == ["checkpoint-2"]  # the old run is gone
    card = (tmp_path / "out" / "README.md").read_text()
    assert "(fr to en)" in card and "2 steps" in card


@pytest.mark.both_lines
def test_resume_true_takes_the_newest_complete_checkpoint(corpus, tmp_path, caplog, capsys):
    """In this process (two fresh ones cost 15-20 s of imports; a kill mid-save and its resume in fresh processes:
    test_nothing_lost.py), transformers' own warnings captured too."""
    from transformers.utils import logging as transformers_logging

    recipe = tiny_recipe(corpus, tmp_path / "out", **FAST)
    run(*parse_arguments([str(write_recipe(tmp_path / "first.yaml", recipe))]))
    (tmp_path / "out" / "checkpoint-4" / "trainer_state.json").unlink()  # as a kill -9 during the save leaves it
    six = str(write_recipe(tmp_path / "six.yaml", {**recipe, "max_steps": 6}))
    transformers_logging.enable_propagation()
    try:
        with caplog.at_level("INFO", logger="aayn"), caplog.at_level("WARNING", logger="transformers"):
            run(*parse_arguments([six, "--resume_from_checkpoint", "true"]))
    finally:
        transformers_logging.disable_propagation()
    assert "skipping checkpoint-4: it lacks trainer_state.json" in caplog.text
    assert "resuming from" in caplog.text and "checkpoint-2, the newest complete checkpoint" in caplog.text
    assert "missing keys" not in caplog.text.lower()  # the tied weights load exactly; no false warning
    state = json.loads((tmp_path / "out" / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    (tmp_path / "out" / "checkpoint-6" / "trainer_state.json").unlink()
    recipe_path = str(write_recipe(tmp_path / "r.yaml", recipe))
    resume = ["--resume_from_checkpoint", str(tmp_path / "out" / "checkpoint-6")]
    assert aayn(["train", recipe_path, *resume]) == 2  # refused before any work
    assert "lacks trainer_state.json" in capsys.readouterr().err


def test_help_answers_without_torch_and_mistakes_are_named_by_transformers_parser(corpus, tmp_path):
    """`--help` reads the Trainer's keys from transformers' source and lists every key the real parser takes,
    without importing torch; a recipe's mistakes are named (the nearest key or choice) by `HfArgumentParser`."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    options = {option.replace("-", "_") for action in argument_parser()._actions for option in action.option_strings}
    options -= {"_h", "__help"} | {option for option in options if option.startswith("__no_")}
    for command in (["-m", "aayn.train", "--help"], ["-m", "aayn.cli", "train", "--help"]):
        result = subprocess.run([sys.executable, *command], capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stderr
        listed = {word.rstrip(",").replace("-", "_") for word in result.stdout.split() if word.startswith("--")}
        assert options <= listed  # every key the real parser takes, with its help
    typo = write_recipe(tmp_path / "typo.yaml", tiny_recipe(corpus, tmp_path / "out", max_step=5))
    good = write_recipe(tmp_path / "good.yaml", tiny_recipe(corpus, tmp_path / "out"))
    probe = f"""
import sys
from aayn.cli import main
def run(argv):
    try:
        print("exit", main(argv))
    except SystemExit as exit:
        print("exit", exit.code)
for argv in (["--help"], ["translate", "--help"], ["evaluate"], ["train", "--help"], ["train", "missing.yaml"]):
    run(argv)
print(sorted(name for name in ("torch", "transformers", "datasets") if name in sys.modules))
for argv in (["train", {str(typo)!r}], ["train", {str(good)!r}, "--max_steps", "x"],
             ["train", {str(good)!r}, "--optim", "adamw_torh", "--bf16", "auto"],
             ["train", {str(good)!r}, "--lr_scheduler_type", "inverse_sqr"]):
    run(argv)
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    lines = result.stdout.strip().splitlines()
    assert "[]" in lines, result.stderr[-2000:]
    assert [line.split()[1] for line in lines if line.startswith("exit ")] == ["0", "0", "2", "0"] + ["2"] * 5
    assert "did you mean max_steps?" in result.stderr and "--max_steps: invalid int value: 'x'" in result.stderr
    assert "--optim: invalid choice: 'adamw_torh'; did you mean adamw_torch?" in result.stderr
    assert "--lr_scheduler_type: invalid choice: 'inverse_sqr'; did you mean inverse_sqrt?" in result.stderr


@pytest.mark.parametrize("precision", [{}, {"bf16": True, "bf16_weights": True}], ids=["float32", "bf16_weights"])
def test_accelerate_launch_runs_two_processes_on_cpu(corpus, tmp_path, precision):
    """The README's launch line: `accelerate launch --multi_gpu --num_processes 2 -m aayn.train` (torchrun under
    the hood; gloo on CPU; here the script that is aayn.train keeping each process's weights). `--cpu` would pick
    accelerate's single-process launcher. The two processes end with the same weights (their gradients
    all-reduced: without it each would keep its own half of the data's), unlike one process's run of the recipe (so
    each did not train on all of it); with bf16 weights, DDP reduces their bf16 gradients, those are the float32
    masters, and the final folder holds them."""
    recipe = tiny_recipe(corpus, tmp_path / "out", **FAST, save_strategy="no", **precision)
    recipe = write_recipe(tmp_path / "r.yaml", recipe)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    script = str(Path(__file__).parent / "scripts" / "weights_per_process.py")
    accelerate = Path(sys.executable).with_name("accelerate")
    launch = ["launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
              "--dynamo_backend", "no"]  # fmt: skip
    result = subprocess.run([str(accelerate), *launch, script, str(tmp_path / "two"), str(recipe)],
                            capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "x 2 processes" in (tmp_path / "out" / "README.md").read_text()
    weights = load_file(tmp_path / "out" / "model.safetensors")
    assert {weight.dtype for weight in weights.values()} == {torch.float32}
    assert any(not torch.equal(weight, weight.bfloat16().float()) for weight in weights.values())
    first, second = (load_file(tmp_path / "two" / f"rank-{rank}.safetensors") for rank in (0, 1))
    assert first.keys() == second.keys() and len(first) > 10
    assert all(torch.equal(first[key], second[key]) for key in first)
    if not precision:  # the one-process run once, where the all-reduce is of bf16 gradients into masters
        return
    assert any(not torch.equal(weight, weight.bfloat16().float()) for weight in first.values())  # masters
    one = write_recipe(tmp_path / "one.yaml", {**yaml.safe_load(recipe.read_text()), "output_dir": str(tmp_path / "o")})
    result = subprocess.run([sys.executable, script, str(tmp_path / "one"), str(one)], capture_output=True, text=True,
                            env=env, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    alone = load_file(tmp_path / "one" / "rank-0.safetensors")
    assert alone.keys() == first.keys() and not all(torch.equal(first[key], alone[key]) for key in first)


def test_saved_tokenizers_carry_no_training_truncation(finished_run):
    from tokenizers import Tokenizer

    long_sentence = " ".join(["six one eight"] * 60) + "."
    for folder in (finished_run, finished_run / "checkpoint-4", finished_run / "tokenizer"):
        assert json.loads((folder / "tokenizer.json").read_text())["truncation"] is None, folder
        ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(long_sentence).ids
        assert len(ids) > 100  # not cut to the training's max_source_length=8


def test_average_names_a_cut_file_and_a_missing_tokenizer(finished_run, tmp_path, capsys):
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(finished_run / "checkpoint-4", cut)
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert aayn(["average", "--output_dir", str(tmp_path / "a"), str(finished_run / "checkpoint-2"), str(cut)]) == 2
    error = capsys.readouterr().err
    assert f"{cut / 'model.safetensors'} is not a readable safetensors file" in error
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("model.safetensors", "config.json"):
        shutil.copy(finished_run / "checkpoint-4" / name, bare / name)
    assert aayn(["average", "--output_dir", str(tmp_path / "b"), str(finished_run / "checkpoint-2"), str(bare)]) == 2
    assert "holds no tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_bare_train_or_an_invalid_choice_is_one_line(corpus, tmp_path, capsys):
    """Not the whole help (140 lines of Trainer options): one line with the usage, exit 2, the required keys named
    by argparse itself."""
    assert aayn(["train"]) == 2
    error = capsys.readouterr().err
    assert "the following arguments are required: --dataset_name, --source_lang, --target_lang; usage:" in error
    assert len(error.strip().splitlines()) == 2  # the error, and where the traceback is
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", **FAST))
    assert aayn(["train", str(recipe), "--lr_scheduler_type", "inverse_sqr"]) == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'inverse_sqr'" in error and "inverse_sqrt" in error and len(error.splitlines()) == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("spelling", [["--bf16", "auto"], ["--bf16=auto"]])
def test_bf16_auto_trains_in_bf16_only_where_its_matmuls_are_native(
    corpus, tmp_path, native, spelling, monkeypatch, capsys
):
    """The demo recipe's `bf16: auto`: emulated bf16 (AVX2 CPUs) would make each step ~13x slower than float32."""
    monkeypatch.setattr("aayn.training.arguments.bf16_matmuls", lambda use_cpu: (native, "this CPU (TEST)"))
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", **FAST, use_cpu=True))
    args = parse_arguments([str(recipe), *spelling])[2]
    assert args.bf16 is native
    said = capsys.readouterr().out
    assert ("-> bf16 autocast" if native else "-> float32: this CPU (TEST) has no native bf16") in said
    assert parse_arguments([str(recipe), "--bf16", "true"])[2].bf16 is True  # an explicit value is kept


@pytest.mark.parametrize("given", [["--bf16", "true"], ["--bf16=false"], ["--bf16", "auto", "--bf16", "false"]])
def test_a_flag_after_the_recipes_bf16_auto_decides(corpus, tmp_path, given, monkeypatch, capsys):
    """The demo recipe says `bf16: auto`; `--bf16 true` on the command line once ended in the parser's "Truthy value
    expected: got auto" (found on the first GPU run, 2026-11-27)."""
    monkeypatch.setattr("aayn.training.arguments.bf16_matmuls", lambda use_cpu: (False, "this CPU (TEST)"))
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", **FAST, use_cpu=True, bf16="auto"))
    args = parse_arguments([str(recipe), *given])[2]
    assert args.bf16 is (given[-1] in ("true", "--bf16=true"))
    assert "bf16: auto ->" not in capsys.readouterr().out  # the machine is not asked: the last value is explicit


@pytest.mark.parametrize("able", [True, False])
def test_tf32_auto_is_true_on_a_gpu_with_tf32_and_unset_elsewhere(corpus, tmp_path, able, monkeypatch, capsys):
    """The WMT recipes' `tf32: auto`: the Trainer's `tf32: true` raises where TF32 is unavailable (a CPU, a GPU
    before Ampere), so `auto` gives true only on a GPU that has it and leaves the key unset elsewhere."""
    from aayn.training.arguments import _resolve_autos, tf32_matmuls

    monkeypatch.setattr("aayn.training.arguments.tf32_matmuls", lambda use_cpu: (able, "this GPU (TEST)"))
    flags = ["--output_dir", "x", "--tf32", "auto", "--bf16", "false"]
    assert _resolve_autos(flags) == ["--output_dir", "x", *(["--tf32", "true"] if able else []), "--bf16", "false"]
    assert f"tf32: auto -> {'on' if able else 'unset'}: this GPU (TEST)" in capsys.readouterr().out
    assert _resolve_autos(["--tf32=auto", "--tf32", "false"]) == ["--tf32", "false", "--tf32", "false"]
    monkeypatch.setattr("aayn.training.arguments.tf32_matmuls", tf32_matmuls)  # the machine asked again
    assert tf32_matmuls(use_cpu=True) == (False, "no GPU")
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", **FAST, use_cpu=True, tf32="auto"))
    assert parse_arguments([str(recipe)])[2].tf32 is None  # on this CPU: unset, and nothing said
    assert "tf32: auto" not in capsys.readouterr().out


@pytest.mark.parametrize("gpu", [True, False])
def test_attention_auto_is_eager_on_a_cpu_and_sdpa_on_a_gpu(gpu, monkeypatch, capsys):
    """The demo recipe's `attn_implementation: auto`: eager where training runs on a CPU (the recipe's measured
    choice there), sdpa on a GPU; said in one line. The demo recipe as written parses to eager on this CPU."""
    from aayn.training.arguments import _resolve_autos

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    flags = ["--output_dir", "x", "--attn_implementation", "auto"]
    assert _resolve_autos(flags) == ["--output_dir", "x", "--attn_implementation", "sdpa" if gpu else "eager"]
    said = "attn_implementation: auto -> " + ("sdpa: training runs on a GPU" if gpu else "eager: training runs on")
    assert said in capsys.readouterr().out
    assert _resolve_autos([*flags, "--use_cpu", "true"])[3] == "eager"
    if not gpu:
        demo = Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml"
        assert parse_arguments([str(demo)])[0].attn_implementation == "eager"


@pytest.mark.parametrize("gpu", [True, False])
def test_dataloader_workers_auto_collates_beside_a_gpu_only(gpu, monkeypatch, capsys):
    """The WMT recipes' `dataloader_num_workers: auto`: worker processes where training runs on a GPU (said in one
    line), none on a CPU (`use_cpu`, or no GPU), where they would take the step's cores."""
    from aayn.training.arguments import GPU_DATALOADER_WORKERS, _resolve_autos

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    flags = ["--output_dir", "x", "--dataloader_num_workers", "auto"]
    workers = ["--dataloader_num_workers", str(GPU_DATALOADER_WORKERS)] if gpu else []
    assert _resolve_autos(flags) == ["--output_dir", "x", *workers]
    assert ("dataloader_num_workers: auto -> 2" in capsys.readouterr().out) == gpu
    assert _resolve_autos([*flags, "--use_cpu", "true"]) == ["--output_dir", "x", "--use_cpu", "true"]


def test_batches_collated_in_worker_processes_train_as_in_the_training_process(corpus, tmp_path):
    """`dataloader_num_workers` (what `auto` gives on a GPU) with max_tokens batches and length buckets: the same
    losses step for step as batches collated in the training process."""
    shape = dict(max_tokens=64, length_buckets=[8, 16], max_source_length=16, max_target_length=16)
    recipe = tiny_recipe(corpus, tmp_path, **{**FAST, "max_steps": 6}, **shape, do_predict=False, logging_steps=1)
    losses = {}
    for workers in (0, 2):
        folder = tmp_path / f"workers-{workers}"
        flags = {**recipe, "output_dir": str(folder), "dataloader_num_workers": workers, "save_steps": 6}
        run(*parse_arguments([str(write_recipe(tmp_path / f"{workers}.yaml", flags))]))
        history = json.loads((folder / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
        losses[workers] = [entry["loss"] for entry in history if "loss" in entry]
    assert len(losses[0]) == 6 and losses[2] == losses[0]


def test_length_buckets_pad_each_training_batch_to_its_bucket(corpus, tmp_path, monkeypatch):
    """`length_buckets` through `aayn train`: every training step's source and target are one bucket's length and
    one of its batch sizes (`max_tokens // bucket`, or fewer for the bucket's last batch); without max_tokens, or
    with a last bucket under max_source_length, the run is refused before any work."""
    from aayn.cli import main as aayn
    from aayn.model.modeling_aayn import AaynForConditionalGeneration

    seen, forward = [], AaynForConditionalGeneration.forward

    def recording(self, *args, **kwargs):
        if self.training:
            seen.append((tuple(kwargs["input_ids"].shape), tuple(kwargs["labels"].shape)))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(AaynForConditionalGeneration, "forward", recording)
    buckets = [8, 16]
    recipe = tiny_recipe(corpus, tmp_path / "out", **{**FAST, "max_steps": 12}, max_tokens=64, length_buckets=buckets,
                         max_source_length=16, max_target_length=16, do_predict=False)  # fmt: skip
    assert aayn(["train", str(write_recipe(tmp_path / "r.yaml", recipe))]) == 0
    assert len(seen) == 12
    for source, target in seen:
        assert source[1] == target[1] in buckets and source[0] == target[0] <= 64 // source[1]
    assert {shape[1] for shape, _ in seen} <= set(buckets)
    for bad, message in ((dict(max_tokens=None), "give max_tokens too"), (dict(length_buckets=[8]), "must hold")):
        broken = write_recipe(tmp_path / "bad.yaml", {**recipe, **bad, "output_dir": str(tmp_path / "bad")})
        with pytest.raises(ValueError, match=message):
            parse_arguments([str(broken)])
        assert not (tmp_path / "bad").exists()


def test_torch_compile_through_aayn_train_trains_as_eager_over_length_buckets(corpus, tmp_path):
    """`torch_compile` with `length_buckets` through `aayn train` (the Trainer compiles the model, loss included;
    aot_eager here: dynamo's graphs and AOT autograd, where a GPU runs inductor): each step's loss is the eager
    run's (dropout off: the two draw their masks differently), with no graph break and at most two graphs a
    bucket (dynamo's counters)."""
    from torch._dynamo.utils import counters

    buckets = [8, 16]
    shape = dict(max_tokens=64, length_buckets=buckets, max_source_length=16, max_target_length=16, dropout=0.0)
    recipe = tiny_recipe(
        corpus, tmp_path / "eager", **{**FAST, "max_steps": 8}, **shape, do_predict=False, logging_steps=1
    )
    losses = {}
    for arm, extra in (("eager", {}), ("compiled", {"torch_compile_backend": "aot_eager"})):
        torch._dynamo.reset()
        counters.clear()
        folder = tmp_path / arm
        run(
            *parse_arguments(
                [str(write_recipe(tmp_path / f"{arm}.yaml", {**recipe, **extra, "output_dir": str(folder)}))]
            )
        )
        history = json.loads((folder / "checkpoint-8" / "trainer_state.json").read_text())["log_history"]
        losses[arm] = [entry["loss"] for entry in history if "loss" in entry]
    assert len(losses["eager"]) == 8
    torch.testing.assert_close(losses["compiled"], losses["eager"], rtol=1e-4, atol=1e-4)
    assert 1 <= counters["stats"]["unique_graphs"] <= 2 * len(buckets) and not counters["graph_break"]
    torch._dynamo.reset()
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)  # Accelerate's shared state keeps the compiled run's dynamo plugin


def test_bf16_auto_asks_the_machine():
    import torch

    from aayn.training.arguments import bf16_matmuls

    native, unit = bf16_matmuls(use_cpu=True)
    assert isinstance(native, bool) and torch.backends.cpu.get_cpu_capability() in unit
