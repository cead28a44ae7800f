import json

import pytest

from aayn.cli import main


def test_copy_task_command_trains_saves_and_reloads(tmp_path, capsys):
    assert main(["copy-task", "--steps", "20", "--output_dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "trained 20 steps" in out and "exact match" in out and "->" in out
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "aayn"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["copy-task", "--steps", "0"], "--steps must be a positive integer, got 0"),
        (["copy-task", "--steps", "x"], "invalid int value: 'x'"),
        (["nonsense"], "invalid choice: 'nonsense'"),
    ],
)
def test_bad_arguments_are_clear_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err
