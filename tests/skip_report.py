"""A pytest plugin (conftest loads it): the run's skipped tests, each with its reason, printed at the end; under
AAYN_STRICT=1 (the README's test command, bash .ci/run) a skip that no entry of `allowed_skips.ALLOWED` covers fails
the run, so that nothing that matters goes quiet behind a skip. An expected failure (xfail, or an xfail that
passed) counts as a skip, its reason led by "xfail: ": a test that may fail unseen is no test."""

import fnmatch
import os
import re
from collections import defaultdict

import pytest
from allowed_skips import ALLOWED

_skipped: dict[str, str] = {}  # test id -> reason, in the process that reports (xdist's controller, or the only one)


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, (tuple, list)) else str(longrepr)  # a list once xdist sent it
    return reason.removeprefix("Skipped: ")


def allowed(test_id: str, reason: str) -> bool:
    return any(fnmatch.fnmatch(test_id, ids) and re.match(why, reason) for ids, why in ALLOWED)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if hasattr(report, "wasxfail"):
        _skipped[report.nodeid] = f"xfail: {report.wasxfail}"
    elif report.skipped:
        _skipped[report.nodeid] = skip_reason(report)


def unlisted() -> dict[str, str]:
    return {test_id: why for test_id, why in _skipped.items() if not allowed(test_id, why)}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller sees every report and decides
        return
    if os.environ.get("AAYN_STRICT") and unlisted() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if not _skipped:
        return
    by_reason = defaultdict(list)
    for test_id, why in sorted(_skipped.items()):
        by_reason[why].append(test_id)
    terminalreporter.section(f"skipped: {len(_skipped)} tests, by reason")
    for why, test_ids in sorted(by_reason.items(), key=lambda item: -len(item[1])):
        terminalreporter.write_line(f"{len(test_ids)} x {why}")
        for test_id in test_ids:
            terminalreporter.write_line(f"    {test_id}")
    strays = unlisted()
    if strays:
        terminalreporter.section("skips that tests/allowed_skips.py does not list", red=True)
        for test_id, why in sorted(strays.items()):
            terminalreporter.write_line(f"{test_id}: {why}")
        if os.environ.get("AAYN_STRICT"):
            terminalreporter.write_line("AAYN_STRICT=1: an unlisted skip fails the run (list it, with why, or fix it)")
