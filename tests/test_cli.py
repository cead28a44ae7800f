import json

import pytest
import torch
from cli_helpers import fails

from aayn.cli import main


def test_copy_task_command_trains_saves_and_reloads(tmp_path, capsys):
    assert main(["copy-task", "--steps", "20", "--output_dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "trained 20 steps" in out and "exact match" in out and "->" in out
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "aayn"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["copy-task", "--steps", "0"], "argument --steps: must be a positive integer, got 0"),
        (["copy-task", "--steps", "x"], "invalid int value: 'x'"),
        (["nonsense"], "invalid choice: 'nonsense'"),
    ],
)
def test_bad_arguments_are_clear_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "device, message",
    [("bogus", "--device 'bogus' is no torch device"), ("cuda", "--device cuda: ")],
)
def test_a_device_this_machine_lacks_is_one_line(saved, tmp_path, capsys, device, message):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert message in fails(capsys, "translate", "--model", saved[0], "--device", device, "One.")
    if device == "cuda" and torch.version.cuda is None:  # a CPU build of torch: said so, with what it runs on
        assert f"this torch build ({torch.__version__}) has no CUDA; it runs on cpu" in fails(
            capsys, "bench", "--device", "cuda", "--quick"
        )
