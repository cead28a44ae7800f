"""Recipes: the paper's recipes follow §5.3's schedule; a recipe's values are overridden by flags; unknown keys,
mistyped values and malformed files are named in one line; YAML's `no` is the word no."""

import math
from pathlib import Path

import pytest
import torch
from training_helpers import tiny_recipe, write_numbers_corpus, write_recipe
from transformers import get_scheduler

from aayn.training import parse_arguments

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_numbers_corpus(tmp_path_factory.mktemp("numbers"))


@pytest.mark.parametrize("recipe", ["base-wmt14-en-de", "base-wmt14-en-fr", "big-wmt14-en-de"])
def test_the_paper_recipes_follow_the_papers_learning_rate_schedule(recipe):
    """§5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), which is transformers' `inverse_sqrt` schedule
    with learning_rate = (d_model * warmup)^-0.5. Each recipe's values, through the Trainer's scheduler, against the
    formula (the Trainer steps the scheduler after each optimizer step, so update k uses step k - 1's rate)."""
    model_args, _, args = parse_arguments([str(RECIPES / f"{recipe}.yaml"), "--bf16", "false"])  # parsed on a CPU
    d_model, warmup = model_args.d_model, args.warmup_steps
    assert (args.lr_scheduler_type, warmup) == ("inverse_sqrt", 4000)
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.98, 1e-9)
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=args.learning_rate)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=warmup)
    for step in range(1, 100_001):
        optimizer.step()
        scheduler.step()
        if step in (1, 10, 1000, 3999, 4000, 4001, 10_000, 100_000):
            paper = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
            assert math.isclose(scheduler.get_last_lr()[0], paper, rel_tol=1e-4), step


@pytest.mark.parametrize("recipe", ["base-wmt14-en-de", "base-wmt14-en-fr", "big-wmt14-en-de"])
def test_the_paper_recipes_take_25000_tokens_a_step_on_any_number_of_processes(recipe, monkeypatch, capsys):
    """`gradient_accumulation_steps: auto` makes `batch_tokens` (the paper's ~25000) from `max_tokens` batches over
    the processes `accelerate launch` starts (WORLD_SIZE): 8 steps of 3,125 on one device, 1 on eight, 1 with the
    paper's batch in one micro-batch; each said in one line. A given number wins, and batch_tokens is then said to
    be unused."""
    path = str(RECIPES / f"{recipe}.yaml")
    cases = [(None, [], 8), ("8", [], 1), ("2", [], 4), (None, ["--max_tokens", "25000"], 1)]
    for processes, flags, accumulation in cases:
        if processes is None:
            monkeypatch.delenv("WORLD_SIZE", raising=False)
        else:
            monkeypatch.setenv("WORLD_SIZE", processes)
        _, data_args, args = parse_arguments([path, "--bf16", "false", *flags])
        micro = data_args.max_tokens
        assert args.gradient_accumulation_steps == accumulation
        assert micro * accumulation * int(processes or 1) == data_args.batch_tokens == 25000
        said = (
            f"gradient_accumulation_steps: auto -> {accumulation}: {micro} tokens x {accumulation} x {processes or 1}"
        )
        assert said in capsys.readouterr().out
    args = parse_arguments([path, "--bf16", "false", "--gradient_accumulation_steps", "2"])[2]
    out = capsys.readouterr().out
    assert args.gradient_accumulation_steps == 2
    assert "batch_tokens is not used" in out and "gradient_accumulation_steps: auto" not in out


def test_recipe_values_are_overridden_by_flags(tmp_path, corpus):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out"))
    model_args, data_args, args = parse_arguments([str(recipe), "--max_steps", "3", "--d_model", "64"])
    assert (args.max_steps, model_args.d_model, model_args.ffn_dim) == (3, 64, 64)
    assert (args.adam_beta2, args.adam_epsilon, args.label_smoothing_factor) == (0.98, 1e-9, 0.1)
    assert args.lr_scheduler_type == "inverse_sqrt" and data_args.max_tokens == 400 and args.predict_with_generate


@pytest.mark.parametrize(
    "change, message",
    [
        ({"max_stepz": 3}, ["max_stepz"]),
        ({"learning_rate": "fast"}, ["--learning_rate", "invalid float value: 'fast'"]),
        ({"d_model": 30.5}, ["--d_model", "invalid int value: '30.5'"]),
        ({"lr_scheduler_type": "wavy"}, ["--lr_scheduler_type", "'wavy'"]),
        ({"overlong": "cut"}, ["overlong='cut'; allowed: truncate, drop"]),
        (
            {"gradient_accumulation_steps": "auto"},
            ["gradient_accumulation_steps: auto makes batch_tokens", "give both"],
        ),
        ({"batch_tokens": 0}, ["batch_tokens=0 counts max_tokens batches"]),
        ({"batch_tokens": "many"}, ["--batch_tokens", "invalid int value: 'many'"]),
    ],
)
def test_unknown_keys_and_bad_values_name_the_key(tmp_path, corpus, capsys, change, message):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", **change))
    with pytest.raises((SystemExit, ValueError)) as error:
        parse_arguments([str(recipe)])
    printed = str(error.value) + capsys.readouterr().err
    assert all(part in printed for part in message), printed[-500:]


def test_missing_or_malformed_recipe(tmp_path):
    with pytest.raises(FileNotFoundError, match="recipe 'nope.yaml' does not exist"):
        parse_arguments(["nope.yaml"])
    (tmp_path / "bad.yaml").write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="must be a mapping"):
        parse_arguments([str(tmp_path / "bad.yaml")])


@pytest.mark.parametrize(
    "recipe_change, flags, message",
    [
        ({"max_step": 5}, [], "unknown key in recipe"),
        ({"d_mod": 48}, [], "d_mod; did you mean d_model?"),
        ({}, ["--learning_rat", "0.1"], "unknown flag --learning_rat; did you mean --learning_rate?"),
        ({}, ["--max_step", "5"], "unknown flag --max_step; did you mean --max_steps?"),
    ],
)
def test_keys_are_exact(corpus, tmp_path, recipe_change, flags, message):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out", **recipe_change))
    with pytest.raises(ValueError, match="unknown") as error:
        parse_arguments([str(recipe), *flags])
    assert message in str(error.value)


def test_yaml_no_is_the_word_no(corpus, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"dataset_name: {corpus}\nsource_lang: en\ntarget_lang: fr\neval_strategy: no\n"
        f"save_strategy: no\nnorm_first: true\noutput_dir: {tmp_path / 'out'}\n"
    )
    model_args, _, args = parse_arguments([str(recipe)])
    assert args.eval_strategy == "no" and args.save_strategy == "no" and model_args.norm_first is True


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--max_steps", "5x"], "--max_steps: invalid int value: '5x'"),
        (["--learning_rate=fast"], "--learning_rate: invalid float value: 'fast'"),
        (["--fp16", "maybe"], "--fp16: Truthy value expected: got maybe"),
        (["--do_eval", "maybe"], "--do_eval: Truthy value expected: got maybe"),
        (["--max_tokens", "2.5"], "--max_tokens: invalid int value: '2.5'"),
    ],
)
def test_values_of_the_wrong_type_name_the_key(corpus, tmp_path, flags, message):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(corpus, tmp_path / "out"))
    with pytest.raises(ValueError) as error:
        parse_arguments([str(recipe), *flags])
    assert str(error.value).startswith(message) and len(str(error.value).splitlines()) == 1
    parse_arguments([str(recipe), "--max_steps", "5", "--learning_rate=1e-3", "--fp16", "no", "--max_tokens", "256"])
