"""synced_gpus (what Seq2SeqTrainer passes for predict_with_generate under FSDP and DeepSpeed ZeRO-3): every
process runs decoder steps until the sentences of all processes are done, so the collectives of a sharded model's
forward never wait for a process that has stopped. 2 CPU processes (gloo) whose sentences end at different steps."""

import json

from training_helpers import SCRIPTS, free_port, python


def decode_in_two_processes(tmp_path, synced: bool):
    # unsynced, the process left waiting gives up after 4 s (the decoding itself takes a fraction of a second)
    return python(
        "-m", "torch.distributed.run", "--nproc_per_node", 2, "--master_port", free_port(),
        SCRIPTS / "synced_search.py", tmp_path, int(synced), 60 if synced else 4, timeout=300,
    )  # fmt: skip


def test_synced_processes_step_together_and_decode_as_alone(tmp_path):
    result = decode_in_two_processes(tmp_path, synced=True)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads((tmp_path / f"result-{rank}.json").read_text()) for rank in (0, 1)]
    assert all(record["same"] for record in records)  # the same hypotheses and scores as each process alone
    assert records[0]["calls"] == records[1]["calls"] > 0  # every collective met its partner


def test_without_synced_gpus_the_collectives_of_a_finished_process_go_missing(tmp_path):
    """The failure the option prevents, shown with the same script: the process done first stops calling."""
    result = decode_in_two_processes(tmp_path, synced=False)
    assert result.returncode != 0
    assert not (tmp_path / "result-1.json").exists()
    assert "Timed out" in result.stderr or "timed out" in result.stderr.lower(), result.stderr[-3000:]
