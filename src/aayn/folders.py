"""Writing what aayn leaves behind whole or not at all, one way everywhere: a new folder is written beside its final
name and renamed into place (exports, imports, averaged models, prepared data), a text file is written beside its
name and renamed over it. The standard library only."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

STAGING = ".staging-"  # a folder being written: `.staging-NAME-PID` beside NAME


def check_new_folder(output_dir: Path, option: str = "--output_dir") -> None:
    """A folder aayn may write: absent, or empty (nothing of the user's is ever replaced)."""
    if output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise FileExistsError(f"{option} {output_dir} exists and is not empty; give a new folder")


REPORT = "report.json"  # what `aayn clean` and `aayn mix` write last: {"written_by": "aayn clean", ...}


def replaceable(output: Path, overwrite: bool, command: str, option: str = "--output") -> bool:
    """Whether `output` is a folder `command` wrote earlier that `overwrite` asks to replace (its `REPORT` says
    so); a new or empty folder: False; anything else there is refused."""
    if overwrite and output.is_dir() and (output / REPORT).is_file():
        try:
            if json.loads((output / REPORT).read_text(encoding="utf-8")).get("written_by") == command:
                return True
        except (ValueError, AttributeError):
            pass
        raise FileExistsError(f"{option} {output} holds a {REPORT} {command} did not write; give a new folder")
    check_new_folder(output, option)
    return False


@contextmanager
def replaced_folder(output: Path, replace: bool) -> Iterator[Path]:
    """`staged_folder(output)`, where `replace` (`replaceable`'s answer) lets the earlier folder at `output` be
    removed once the new one is whole: until then it stays as it was."""
    old = output.with_name(f".replaced-{output.name}")
    shutil.rmtree(old, ignore_errors=True)
    with staged_folder(output) as staging:
        yield staging
        if replace:
            output.rename(old)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def staged_folder(final: Path, finished_by_another: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """A folder beside `final` to write into, renamed to `final` when the block ends without error (an empty
    folder at `final` is replaced), removed otherwise: a failure, a full disk or a kill leaves nothing at `final`.
    What a killed process left (its pid gone) is removed first. `finished_by_another(final)`: whether a failed
    rename lost the race to another process writing the same content there (kept, and this copy removed)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f"{STAGING}{final.name}-*"):
        if not process_alive(int(stale.name.rsplit("-", 1)[1])):
            shutil.rmtree(stale, ignore_errors=True)
    staging = final.parent / f"{STAGING}{final.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        yield staging
        if final.is_dir() and not any(final.iterdir()):
            final.rmdir()
        try:
            os.rename(staging, final)
        except OSError:
            if finished_by_another is None or not finished_by_another(final):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def staged_file(final: Path) -> Iterator[Path]:
    """A path beside `final` to write one file to, renamed over `final` when the block ends without error,
    removed otherwise (the file form of `staged_folder`: an Argos package, a text file)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(f".{final.name}.partial-{os.getpid()}")
    try:
        yield partial
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> None:
    """`path` holds `text` whole, or what it held before: written beside it, then renamed over it."""
    with staged_file(path) as partial:
        partial.write_text(text, encoding="utf-8")


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
