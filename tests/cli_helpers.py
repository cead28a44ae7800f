"""Running the `aayn` command in a test and reading its one-line errors (test_translate, test_export)."""

from aayn.cli import main as aayn


def translate_fails(capsys, *argv: str) -> str:
    """`aayn translate ARGV` fails with exit code 2 and one line (no traceback): that line."""
    assert aayn(["translate", *argv]) == 2
    error = capsys.readouterr().err
    assert "aayn translate: error: " in error and "Traceback" not in error
    return error


def fails(capsys, *argv) -> str:
    """An aayn command that stops on a user error: exit status 2 and one message, no traceback."""
    assert aayn([*map(str, argv)]) == 2
    error = capsys.readouterr().err
    message = error[error.index(f"aayn {argv[0]}: error: ") :]  # after the progress bars and log lines
    assert message.splitlines()[1:] == ["(run with --debug for the traceback)"], error[-3000:]
    return message
