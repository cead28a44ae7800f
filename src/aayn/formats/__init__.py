"""The formats aayn writes, reads and translates, one module each, one `Format` subclass each (`base.Format`):

- `aayn_folder.AaynFolder`: aayn's own folder (torch), what training, `aayn average` and `aayn import` write;
- `ctranslate2_folder.CTranslate2Folder`, `onnx_folder.OnnxFolder`: `aayn export`s that aayn translates too;
- `argos_package.ArgosPackage`: `aayn export --format argos`, for Argos Translate and LibreTranslate;
- `fairseq_checkpoint.FairseqCheckpoint`: `aayn import fairseq`.

`FORMATS` is the registry: `aayn export` and `aayn import` are built from it (their choices and arguments),
`aayn.translation.opening` opens any `--model` through it, and adding a format is one module and one `register` line
here. Reading it imports no heavy library: each format imports its own inside the methods that need them.
"""

from __future__ import annotations

from pathlib import Path

from .aayn import AaynFolder
from .argos import ArgosPackage
from .base import Format
from .ctranslate2 import CTranslate2Folder
from .fairseq import FairseqCheckpoint, import_fairseq
from .onnx import OnnxFolder

FORMATS: dict[str, Format] = {}


def register(entry: Format) -> Format:
    """Adds a format to the registry (its name must be new); the exported formats are tried in registry order."""
    if entry.name in FORMATS:
        raise ValueError(f"a format named {entry.name!r} is registered already")
    FORMATS[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    FORMATS.pop(name)


for entry in (CTranslate2Folder(), OnnxFolder(), ArgosPackage(), FairseqCheckpoint(), AaynFolder()):
    register(entry)
HOME = FORMATS["aayn"]


def exports() -> tuple[str, ...]:
    return tuple(name for name, entry in FORMATS.items() if entry.direction == "out")


def imports() -> tuple[str, ...]:
    return tuple(name for name, entry in FORMATS.items() if entry.direction == "in")


def folder_format(folder: str | Path) -> Format:
    """The format of the folder `folder`: the first translated format that holds it, else aayn's own (whose
    checks say what is wrong with a folder that is not one)."""
    folder = Path(folder).expanduser()
    if (folder / "model.safetensors").exists():
        return HOME
    translated = (entry for entry in FORMATS.values() if entry is not HOME and entry.translates and entry.holds(folder))
    return next(translated, HOME)


def export_model(
    model_dir: str | Path,
    output: str | Path,
    format: str = "ctranslate2",
    quantization: str | None = None,
    **package,
) -> Path:
    """A saved aayn folder in another engine's format (`exports()`), written whole or not at all: a folder, or for
    "argos" a package file; `package` holds the format's other arguments (an Argos package's languages and
    version)."""
    if format not in exports():
        raise ValueError(f"--format must be one of {exports()}, got {format!r}")
    return FORMATS[format].write(model_dir, output, quantization=quantization, **package)


__all__ = ["FORMATS", "HOME", "Format", "export_model", "folder_format", "import_fairseq"]
