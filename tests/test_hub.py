"""Pushing to the Hub without a network: the real push_to_hub code of transformers and huggingface_hub talks to
a stand-in for the Hub's HTTP API on this machine (tests/hub_standin.py); the tests read what was uploaded."""

from pathlib import Path

import pytest
from hub_standin import PUSH_WITHOUT_AAYN, TOKEN, HubStandIn, card_metadata, run_against
from training_helpers import FOLDER_FILES, tiny_recipe, write_numbers_corpus, write_recipe

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def files_holding(folder: Path, secret: bytes) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() and secret in path.read_bytes()]


@pytest.fixture(scope="module")
def pushed_run(tmp_path_factory):
    """`aayn train --push_to_hub` with a --hub_token, against the stand-in: (hub, output folder)."""
    tmp_path = tmp_path_factory.mktemp("push")
    corpus = write_numbers_corpus(tmp_path / "data")
    recipe = tiny_recipe(
        corpus,
        tmp_path / "run",
        max_steps=4,
        save_steps=2,
        eval_strategy="no",
        generation_num_beams=1,
        max_predict_samples=4,
        license="cc-by-sa-4.0: see NOTICE, #1",
    )
    flags = ["--push_to_hub", "true", "--hub_model_id", "me/numbers", "--hub_token", TOKEN]
    with HubStandIn() as hub:
        run_against(hub, tmp_path, "-m", "aayn.train", str(write_recipe(tmp_path / "r.yaml", recipe)), *flags)
    return hub, tmp_path / "run"


def test_aayn_train_pushes_a_complete_folder_with_aayns_card(pushed_run):
    hub, output = pushed_run
    uploaded = hub.repos["me/numbers"]
    assert FOLDER_FILES | {"generation_config.json", "README.md"} <= set(uploaded)
    assert not [path for path in uploaded if path.startswith("checkpoint-")]
    assert uploaded["README.md"] == (output / "README.md").read_bytes()  # the card written at the end, not replaced
    meta = card_metadata(uploaded["README.md"])
    assert meta["language"] == ["en", "fr"] and meta["pipeline_tag"] == "translation" and "aayn" in meta["tags"]
    assert meta["license"] == "cc-by-sa-4.0: see NOTICE, #1"  # YAML-special characters survive
    assert {m["type"] for m in meta["model-index"][0]["results"][0]["metrics"]} == {"bleu", "chrf"}
    assert "generated from the trainer" not in uploaded["README.md"].decode()
    assert meta in hub.validated  # the Hub's YAML check saw this card


def test_the_hub_token_is_used_but_never_written(pushed_run):
    hub, output = pushed_run
    assert TOKEN in hub.tokens
    assert files_holding(output, TOKEN.encode()) == []  # training_args.bin of the run and its checkpoints included
    assert (output / "training_args.bin").is_file() and list(output.glob("checkpoint-*/training_args.bin"))
    for commit in hub.commits:
        assert not [path for path, content in commit["files"].items() if TOKEN.encode() in content], commit["message"]


def test_model_and_tokenizer_push_to_hub_without_aayn(pushed_run, tmp_path):
    _, output = pushed_run
    with HubStandIn() as hub:
        run_against(hub, tmp_path, "-c", PUSH_WITHOUT_AAYN, str(output), "you/copy", TOKEN)
    uploaded = hub.repos["you/copy"]
    assert FOLDER_FILES | {"README.md"} <= set(uploaded)
    assert [commit["message"] for commit in hub.commits] == ["Upload AaynForConditionalGeneration", "Upload tokenizer"]
    for commit in hub.commits:  # neither push replaced the card with transformers' generic one
        meta = card_metadata(commit["files"]["README.md"])
        assert meta["language"] == ["en", "fr"] and "aayn" in meta["tags"] and meta["pipeline_tag"] == "translation"
    assert hub.commits[0]["files"]["README.md"] == (output / "README.md").read_bytes()
    assert uploaded["model.safetensors"] == (output / "model.safetensors").read_bytes()
