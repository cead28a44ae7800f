"""An `aayn train` run's output_dir: who may write it, what may be deleted, which checkpoints can be resumed.

The marker file `_aayn_run.json` says a folder is an aayn run (only such folders are ever deleted, by
`--overwrite_output_dir`) and is the run's lock: the running main process holds an exclusive `flock` on it, which
the kernel releases when the process ends however it ends, so a killed run leaves no stuck lock; the file still
says "running", and the next run takes it over and logs that. (`_`: `push_to_hub` uploads no `_*` file.)
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import zipfile
from pathlib import Path

from transformers.utils import logging

from ..checks import safetensors_fault
from .average import checkpoint_step

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; runs are then not kept out of each other's folders
    fcntl = None

logger = logging.get_logger("aayn.training")

RUN_MARKER = "_aayn_run.json"
FINAL_STAGING = "_final-partial"  # the final folder's files are written here, then moved into output_dir
# what the Trainer writes into a checkpoint before the next one may start; a resume needs them all. Under FSDP the
# optimizer is Accelerate's: optimizer.bin (FULL_STATE_DICT, as recipes/accelerate/fsdp2.yaml) or a DCP folder
CHECKPOINT_FILES = ("model.safetensors", "trainer_state.json", "optimizer.pt", "scheduler.pt")
FSDP_FILES = {"optimizer.pt": ("optimizer.bin", "optimizer_0")}


class OutputDirInUse(FileExistsError):
    """Another aayn train holds this output_dir."""


class RunLock:
    """The exclusive hold of a run on its output_dir, through the marker file (see the module's docstring)."""

    def __init__(self, output: Path):
        self.output = output
        self.path = output / RUN_MARKER
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise PermissionError(f"output_dir {self.output} cannot be written: {error}") from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_marker(fd)
                os.close(fd)
                raise OutputDirInUse(
                    f"output_dir {self.output} is in use by another aayn train ({_describe(holder)}); wait for it "
                    "to end or give another output_dir"
                ) from None
        self._fd = fd

    def start(self) -> None:
        """Mark the folder as this run's (the lock is held)."""
        previous = _read_marker(self._fd)
        if previous.get("state") == "running":
            logger.warning(
                f"taking over output_dir {self.output} from {_describe(previous)}, which ended without releasing "
                "it (killed?)"
            )
        self._write(state="running")

    def release(self, state: str | None = None) -> None:
        """Mark the run `finished` or `failed` (None: leave the record as it is) and let the next run in."""
        if self._fd is None:
            return
        if state is not None:
            self._write(state=state)
        os.close(self._fd)  # closing drops the flock
        self._fd = None

    def _write(self, state: str) -> None:
        record = {
            "state": state,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        data = (json.dumps(record, indent=1) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)


def _read_marker(fd: int) -> dict:
    try:
        data = os.pread(fd, 1 << 16, 0)
        record = json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _describe(record: dict) -> str:
    if not record:
        return "a process that left no record"
    return f"process {record.get('pid')} on {record.get('host')}, since {record.get('time')}"


def _inside(path: str | None, folder: Path) -> bool:
    if not path or not Path(path).expanduser().exists():
        return False
    path, folder = Path(path).expanduser().resolve(), folder.resolve()
    return path == folder or folder in path.parents


def claim_output_dir(output: Path, *, resume: str | None, overwrite: bool, sources: dict[str, str | None]) -> RunLock:
    """Lock output_dir for this run and clear it where asked; run_translation.py's rule for an earlier run (refuse,
    resume, or --overwrite_output_dir), deleting only a folder that holds an aayn run and none of this run's
    inputs (`sources`: option -> path)."""
    if output.exists() and not output.is_dir():
        raise NotADirectoryError(f"output_dir {output} is a file, not a folder")
    earlier = sorted(p.name for p in output.iterdir() if p.name != RUN_MARKER) if output.is_dir() else []
    ours = (output / RUN_MARKER).is_file()
    if earlier and resume is None:
        if not ours:
            raise FileExistsError(
                f"output_dir {output} holds files that aayn train did not write (no {RUN_MARKER}; "
                f"{', '.join(earlier[:3])}{', ...' if len(earlier) > 3 else ''}): aayn never "
                f"{'deletes' if overwrite else 'writes into'} such a folder; give another output_dir"
            )
        if overwrite:
            for option, path in sources.items():
                if _inside(path, output):
                    raise ValueError(
                        f"--overwrite_output_dir would delete {option}={path}, which lies in output_dir {output}; "
                        "give another output_dir"
                    )
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PermissionError(f"output_dir {output} cannot be written: {error}") from None
    lock = RunLock(output)
    lock.acquire()
    if earlier and resume is None:
        if not overwrite:
            lock.release()
            raise FileExistsError(
                f"output_dir {output} holds an earlier run; resume it with --resume_from_checkpoint true, "
                "replace it with --overwrite_output_dir true, or give another output_dir"
            )
        logger.warning(f"--overwrite_output_dir: deleting the earlier run in {output}")
        for name in earlier:
            path = output / name
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    lock.start()
    shutil.rmtree(output / FINAL_STAGING, ignore_errors=True)  # what a run killed while saving its end left
    return lock


def checkpoint_faults(folder: Path) -> list[str]:
    """Why `folder` cannot be resumed from (empty: it can): files a killed or disk-full save left missing, empty
    or cut short. Reads headers and directories only, not the tensors."""
    faults = []
    for name in CHECKPOINT_FILES:
        path = folder / name
        if not path.exists():  # FSDP's own file in its place, where the Trainer ran under FSDP
            path = next((folder / other for other in FSDP_FILES.get(name, ()) if (folder / other).exists()), path)
            name = path.name
        if path.is_dir():
            if not any(path.iterdir()):
                faults.append(f"{name} is empty")
        elif not path.is_file():
            faults.append(f"it lacks {name}")
        elif path.stat().st_size == 0:
            faults.append(f"{name} is empty")
        elif name.endswith(".json"):
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as error:
                faults.append(f"{name} does not parse ({error})")
        elif name.endswith(".safetensors"):
            problem = safetensors_fault(path)
            if problem:
                faults.append(f"{name} {problem}")
        elif not zipfile.is_zipfile(path):  # torch.save's format: a cut file has no central directory
            faults.append(f"{name} is cut short (not a complete torch file)")
    return faults


def complete_checkpoints(output_dir: str | Path) -> tuple[list[Path], dict[Path, list[str]]]:
    """`checkpoint-N` folders a run can resume from, oldest first, and the others with what is wrong with them."""
    complete, incomplete = [], {}
    for folder in sorted(Path(output_dir).glob("checkpoint-*"), key=checkpoint_step):
        if checkpoint_step(folder) < 0:
            continue
        faults = checkpoint_faults(folder)
        if faults:
            incomplete[folder] = faults
        else:
            complete.append(folder)
    return complete, incomplete


def resume_checkpoint(value, output_dir: str) -> str | None:
    """`resume_from_checkpoint`: a checkpoint folder, or true (the newest complete one in output_dir)."""
    if value is None or str(value).lower() in ("false", "no", ""):
        return None
    complete, incomplete = complete_checkpoints(output_dir)
    if str(value).lower() in ("true", "yes"):
        if not complete:
            reasons = "; ".join(f"{folder.name}: {', '.join(faults)}" for folder, faults in incomplete.items())
            raise ValueError(
                f"resume_from_checkpoint=true but {output_dir} holds no complete checkpoint"
                + (f" ({reasons})" if reasons else "")
            )
        for folder, faults in incomplete.items():
            if checkpoint_step(folder) > checkpoint_step(complete[-1]):
                logger.warning(f"skipping {folder.name}: {', '.join(faults)} (a save that did not finish)")
        logger.warning(f"resuming from {complete[-1]}, the newest complete checkpoint")
        return str(complete[-1])
    faults = checkpoint_faults(Path(value))
    if faults:
        raise ValueError(f"resume_from_checkpoint={value} cannot be resumed from: {', '.join(faults)}")
    return str(value)


def move_final_files(staging: Path, output: Path) -> None:
    """The final folder's files from `staging` into `output`, each by an atomic rename, the weights last: where
    `model.safetensors` is, every other file of the final folder is already whole beside it."""
    names = sorted((p.name for p in staging.iterdir()), key=lambda name: name == "model.safetensors")
    for name in names:
        target = output / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(staging / name, target)
    staging.rmdir()
