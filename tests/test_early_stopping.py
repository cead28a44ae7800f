"""Early stopping on validation BLEU: recipe keys checked before training like every key; a run whose BLEU stops
improving stops (transformers' EarlyStoppingCallback), and average_last_checkpoints then averages the checkpoints
that run wrote (the last N, or all of them when it wrote fewer), as the log says."""

import json

import pytest
from training_helpers import tiny_recipe, write_numbers_corpus, write_recipe

from aayn.cli import main as aayn
from aayn.training import parse_arguments, run

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)

STOPPING = dict(
    max_steps=40,
    eval_strategy="steps",
    eval_steps=2,
    save_steps=2,
    save_total_limit=3,
    metric_for_best_model="bleu",
    early_stopping_patience=2,
    learning_rate=1e-9,  # nothing is learned: validation BLEU never improves
    generation_num_beams=1,
    max_eval_samples=4,
    max_predict_samples=4,
    num_examples_to_print=0,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_numbers_corpus(tmp_path_factory.mktemp("numbers"))


@pytest.mark.parametrize("average", [2, 5])
def test_a_run_whose_bleu_stops_improving_stops_and_averages_what_it_wrote(corpus, tmp_path, average, caplog):
    recipe = {**tiny_recipe(corpus, tmp_path / "out", **STOPPING), "average_last_checkpoints": average}
    recipe["save_total_limit"] = 10  # the full run would keep 10: enough for 5
    with caplog.at_level("WARNING", logger="aayn"):
        metrics = run(*parse_arguments([write_recipe(tmp_path / "r.yaml", recipe).as_posix()]))
    newest = max((tmp_path / "out").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    state = json.loads((newest / "trainer_state.json").read_text())
    assert state["global_step"] == 6  # evaluations at 2, 4, 6: no improvement after the first, patience 2
    assert [round(e["eval_bleu"], 6) for e in state["log_history"] if "eval_bleu" in e] == [0.0, 0.0, 0.0]
    assert "test_bleu" in metrics and (tmp_path / "out" / "model.safetensors").is_file()
    said = "averaging the 3 checkpoints written, not 5"
    assert (said in caplog.text) == (average == 5)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(predict_with_generate=False), "metric_for_best_model=bleu needs predict_with_generate"),
        (dict(eval_strategy="no", save_strategy="steps"), "early_stopping_patience needs evaluations"),
        (dict(metric_for_best_model=None), "early_stopping_patience needs metric_for_best_model"),
        (dict(load_best_model_at_end=True, average_last_checkpoints=2), "set one of them"),
        (dict(early_stopping_patience=0), "early_stopping_patience must be a positive integer"),
    ],
)
def test_keys_that_do_not_go_together_stop_before_anything_is_written(corpus, tmp_path, capsys, change, message):
    recipe = {**tiny_recipe(corpus, tmp_path / "out", **STOPPING), **change}
    recipe = {key: value for key, value in recipe.items() if value is not None}
    assert aayn(["train", str(write_recipe(tmp_path / "r.yaml", recipe))]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error
    assert not (tmp_path / "out").exists()
