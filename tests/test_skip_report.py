"""The skip report (tests/skip_report.py) under AAYN_STRICT=1, on a suite of its own in another pytest process: an
unlisted skip and an unlisted expected failure each fail the run; a listed skip does not."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = """
import pytest

def test_passes():
    pass

{extra}
"""


@pytest.mark.parametrize(
    "extra, code",
    [
        ("", 0),
        ("def test_skipped():\n    pytest.skip('nothing here')", 1),
        ("@pytest.mark.xfail(reason='broken')\ndef test_expected_to_fail():\n    assert False", 1),  # catches an
        ("@pytest.mark.xfail(reason='flaky')\ndef test_expected_to_fail():\n    pass", 1),  # xfail let through
        ("def test_skipped():\n    pytest.skip('test is slow')", 0),  # listed, for transformers' common tests
    ],
    ids=["passes", "unlisted-skip", "unlisted-xfail", "unlisted-xpass", "listed-skip"],
)
def test_an_unlisted_skip_or_expected_failure_fails_a_strict_run(tmp_path, extra, code):
    name = "test_transformers_common.py" if "slow" in extra else "test_suite.py"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / name).write_text(SUITE.format(extra=extra))
    here = str(Path(__file__).parent)
    env = dict(os.environ, AAYN_STRICT="1", PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "skip_report", "-p", "no:cacheprovider",
                             "-p", "no:xdist", f"tests/{name}"], cwd=tmp_path, env=env, capture_output=True,
                            text=True)  # fmt: skip
    assert result.returncode == code, result.stdout[-2000:]
