"""Training across processes: 2-process data parallelism on CPU (gloo), two nodes (two torchrun launchers on this
machine) as one node with two processes, SIGKILL + resume losing nothing, and each epoch's batches and subword draws
the same whether a run has one process or two and whether it was resumed."""

import itertools
import json
import signal
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from training_helpers import SCRIPTS, free_port, python, tiny_recipe, write_numbers_corpus, write_recipe
from transformers import AutoModelForSeq2SeqLM

# one epoch of token batches, each loss logged, the epoch's checkpoint kept (its trainer_state.json has the losses)
EPOCH = dict(num_train_epochs=1, max_steps=-1, eval_strategy="no", save_strategy="epoch", predict_with_generate=False,
             max_tokens=300, logging_steps=1)  # fmt: skip


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    """One torchrun launcher of two processes training EPOCH, each process recording what it was fed: (folder,
    corpus, the run's output folder, its stderr); the reference of the two-node run too."""
    root = tmp_path_factory.mktemp("one-node")
    corpus = write_numbers_corpus(root / "data")
    output = root / "out"
    result = python(
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        2,
        "--master_port",
        free_port(),
        SCRIPTS / "record_training_data.py",
        write_recipe(root / "r.yaml", tiny_recipe(corpus, output, **EPOCH)),
        timeout=600,
        env={"HF_DATASETS_CACHE": str(root / "hf-cache")},  # nothing prepared: the main process makes the BPE
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root, corpus, output, result.stderr


def test_two_process_data_parallel_training_on_cpu(one_node):
    _, _, output, stderr = one_node
    records = [json.loads((output / f"seen-{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["world_size"] for r in records] == [2, 2]
    fed = [[source for batch in r["batches"] for source, _ in batch] for r in records]
    shards = [set(map(tuple, sources)) for sources in fed]
    assert shards[0] and shards[1] and not shards[0] & shards[1]  # each process saw different examples
    assert sum(map(len, fed)) == 240  # one epoch: every training pair exactly once
    assert len(list(output.glob("model*.safetensors"))) == 1  # written once, by the main process
    # logged once, by the main process (not once per process), and the tokenizer was trained, not reused
    assert stderr.count("model: aayn") == 1 and stderr.count("trained a 300-token BPE") == 1
    assert "reusing the tokenizer" not in stderr
    assert AutoModelForSeq2SeqLM.from_pretrained(output).config.model_type == "aayn"


@pytest.mark.parametrize(
    "subwords",
    [dict(bpe_dropout=0.1), dict(tokenizer_type="sentencepiece", vocab_size=120, sentencepiece_alpha=0.1)],
    ids=["bpe_dropout", "sentencepiece_sampling"],
)
def test_sigkill_and_resume_ends_with_the_weights_of_an_uninterrupted_run(tmp_path, subwords):
    """A run killed after its step-4 checkpoint and resumed from it ends with the uninterrupted run's weights, its
    segmentations redrawn each epoch (BPE-dropout, or SentencePiece sampling): the resumed run draws the same."""
    corpus = write_numbers_corpus(tmp_path / "data")
    settings = dict(max_steps=10, save_steps=4, eval_strategy="no", predict_with_generate=False, dropout=0.1)
    settings.update(subwords)
    straight = tmp_path / "straight"
    recipe = write_recipe(tmp_path / "straight.yaml", tiny_recipe(corpus, straight, **settings))
    assert python("-m", "aayn.train", recipe).returncode == 0

    crashed = tmp_path / "crashed"
    recipe = write_recipe(tmp_path / "crashed.yaml", tiny_recipe(corpus, crashed, **settings))
    killed = python(SCRIPTS / "kill_at_step.py", 6, recipe)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (crashed / "checkpoint-4").is_dir() and not (crashed / "checkpoint-8").exists()
    assert not (crashed / "model.safetensors").exists()
    resumed = python("-m", "aayn.train", recipe, "--resume_from_checkpoint", crashed / "checkpoint-4")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    expected, actual = load_file(straight / "model.safetensors"), load_file(crashed / "model.safetensors")
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)
    first = load_file(crashed / "checkpoint-4" / "model.safetensors")
    assert not torch.equal(first["model.shared.weight"], actual["model.shared.weight"])  # it did train after resuming


def test_two_nodes_train_as_one_node_with_two_processes(one_node, tmp_path):
    """`torchrun --nnodes 2 --rdzv_backend c10d` started as two launchers on this machine (one process each, each
    with its own data cache as two machines would have, rendezvous on 127.0.0.1) trains the recipe as one launcher
    with two processes does: the same logged losses and the same weights."""
    import os
    import subprocess
    import sys

    _, corpus, one, _ = one_node
    endpoint, two = f"127.0.0.1:{free_port()}", tmp_path / "two"
    recipe = write_recipe(tmp_path / "two.yaml", tiny_recipe(corpus, two, **EPOCH))
    launchers = []
    for node in range(2):
        env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", HF_DATASETS_CACHE=str(tmp_path / f"c{node}"))
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
                   "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", "aayn-two-nodes",
                   "-m", "aayn.train", str(recipe)]  # fmt: skip
        launchers.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outcomes = [launcher.communicate(timeout=600) for launcher in launchers]
    assert [launcher.returncode for launcher in launchers] == [0, 0], outcomes[0][1][-2000:] + outcomes[1][1][-2000:]

    def losses(folder: Path) -> list[float]:
        (checkpoint,) = folder.glob("checkpoint-*")
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        return [entry["loss"] for entry in state["log_history"] if "loss" in entry]

    assert len(losses(one)) >= 4 and losses(two) == pytest.approx(losses(one), rel=1e-5)
    assert "x 2 processes" in (two / "README.md").read_text()  # one world of two, not two of one
    expected, actual = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)


def record_training(recipe: Path, world: int, *flags):
    """tests/scripts/record_training_data.py on `recipe` in `world` processes (torchrun's, gloo, for two)."""
    script = SCRIPTS / "record_training_data.py"
    if world == 1:
        return python(script, recipe, *flags, timeout=600)
    launcher = ("-m", "torch.distributed.run", "--nproc_per_node", world, "--master_port", free_port())
    return python(*launcher, script, recipe, *flags, timeout=600)


def epochs_fed(record: dict) -> list[list]:
    """One process's batches, cut into its epochs where each began."""
    starts = [*record["epoch_starts"], len(record["batches"])]
    return [record["batches"][start:end] for start, end in itertools.pairwise(starts)]


@pytest.mark.both_lines  # the Trainer's epoch loop and its resume differ between the lines
@pytest.mark.parametrize("world", [1, 2], ids=["one-process", "two-processes"])
def test_each_epoch_draws_anew_and_a_resumed_run_feeds_what_the_whole_run_fed(tmp_path, world):
    """BPE-dropout over 3 epochs of token batches, run whole and resumed from a checkpoint inside epoch 1 or later:
    each epoch's segmentations are new (most sentences segmented otherwise than in every earlier epoch), and each
    process of the resumed run is fed what the same process of the whole run was fed from that step on: the same
    examples, in the same order, segmented the same; and each epoch's batches come in an order of their own.

    Catches: `SharedEpoch` dropped from the trainer's loader, or `MaxTokensBatchSampler.sampler` given back (two
    processes: Accelerate then hands the epoch to the sampler alone, and epochs 1 and 2 draw epoch 0's segmentations;
    a resumed epoch draws as epoch 0 with one process), and `SharedEpoch.set_epoch` not setting the sampler (a
    resumed run of two processes shuffles its epoch as epoch 0; on 4.57 every epoch of two processes is shuffled as
    epoch 0); and, on 4.57, `AaynTrainer._load_optimizer_and_scheduler` left to the Trainer (a run of two processes
    on a CPU cannot be resumed: torch.load refuses `cpu:0`)."""
    from tokenizers import Tokenizer

    corpus = write_numbers_corpus(tmp_path / "data")
    settings = dict(num_train_epochs=3, max_steps=-1, eval_strategy="no", save_strategy="steps", save_steps=2,
                    predict_with_generate=False, max_tokens=300, bpe_dropout=0.1)  # fmt: skip
    whole = tmp_path / "whole"
    result = record_training(write_recipe(tmp_path / "whole.yaml", tiny_recipe(corpus, whole, **settings)), world)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads((whole / f"seen-{rank}.json").read_text()) for rank in range(world)]
    assert [len(record["epoch_starts"]) for record in records] == [3] * world

    decode = Tokenizer.from_file(str(whole / "tokenizer.json")).decode
    for record in records:  # each epoch shuffles its batches anew: which sentences come first differs
        firsts = [frozenset(decode(source) for source, _ in batches[0]) for batches in epochs_fed(record)]
        assert len(set(firsts)) == 3, firsts
    draws = []  # per epoch: (source text, target text) -> the segmentations drawn for it, over every process
    for epoch in range(3):
        drawn = defaultdict(list)
        for record in records:
            for batch in epochs_fed(record)[epoch]:
                for source, target in batch:
                    drawn[decode(source), decode(target)].append((source, target))
        assert sum(map(len, drawn.values())) == 240  # every pair once an epoch
        draws.append({text: sorted(segmentations) for text, segmentations in drawn.items()})
    for later in (1, 2):
        for earlier in range(later):
            same = sum(draws[later][text] == draws[earlier][text] for text in draws[later])
            assert same < 0.6 * len(draws[later]), (later, earlier, same)  # all of them where the epoch is lost

    per_epoch = len(epochs_fed(records[0])[0])  # optimizer steps an epoch (one batch a step)
    step = next(k for k in range(per_epoch + 1, 3 * per_epoch) if k % 2 == 0 and k % per_epoch)
    resumed = tmp_path / "resumed"
    recipe = write_recipe(tmp_path / "resumed.yaml", tiny_recipe(corpus, resumed, **settings))
    result = record_training(recipe, world, "--resume_from_checkpoint", whole / f"checkpoint-{step}")
    assert result.returncode == 0, result.stderr[-3000:]
    for rank, record in enumerate(records):
        fed = json.loads((resumed / f"seen-{rank}.json").read_text())["batches"]
        assert len(fed) == len(record["batches"]) - step and fed == record["batches"][step:], rank
