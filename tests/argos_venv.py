"""Argos Translate's own venv (it pulls spaCy, stanza and MiniSBD, which aayn's test extra does not hold), made once
per test venv under its prefix: by `.ci/run` beside the other venvs (`python tests/argos_venv.py`), or else by the
first test that needs it."""

import os
import subprocess
import sys
from pathlib import Path

ARGOS = "argostranslate==1.11.0"
VENV = Path(sys.prefix) / "argos-venv"
INSTALL = Path(__file__).resolve().parents[1] / ".ci" / "install"  # pip install, by uv where .ci/run has it


def argos_venv() -> Path:
    """The venv's Python, the venv made first where it is not ready (torch 2.13.0 first, for stanza; from
    AAYN_TORCH_INDEX where set, as .ci/run's own venvs)."""
    python = VENV / "bin" / "python"
    if (VENV / "ready").is_file() and (VENV / "ready").read_text().strip() == ARGOS:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    index = os.environ.get("AAYN_TORCH_INDEX")
    for spec in (["torch==2.13.0", *(["--index-url", index] if index else [])], [ARGOS]):
        done = subprocess.run([sys.executable, str(INSTALL), str(python), *spec], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pip install {' '.join(spec)} in {VENV}: {done.stderr[-3000:]}")
    (VENV / "ready").write_text(ARGOS + "\n")
    return python


if __name__ == "__main__":
    print(f"Argos Translate's venv: {argos_venv()}")
