"""The registry of formats: `FORMATS` by name, in the order a folder's format is looked for. Adding a format is its
room (`aayn/formats/<name>/`, a `Format` declaration in its `__init__`) and one line of `ROOMS`. Reading it imports
the declarations only: no engine, no writer, no heavy library."""

from __future__ import annotations

import importlib
from pathlib import Path

from .base import Format

# the rooms, as "module:declaration"; a folder's format is the first whose files it holds (the aayn folder's last)
ROOMS = (
    "ctranslate2:CTranslate2Folder",
    "onnx:OnnxFolder",
    "argos:ArgosPackage",
    "fairseq:FairseqCheckpoint",
    "marian:MarianFolder",
    "aayn:AaynFolder",
)

FORMATS: dict[str, Format] = {}


def register(entry: Format) -> Format:
    """Adds a format to the registry (its name must be new); folders are matched against formats in this order."""
    if entry.name in FORMATS:
        raise ValueError(f"a format named {entry.name!r} is registered already")
    FORMATS[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    FORMATS.pop(name)


for room in ROOMS:
    module, _, declaration = room.partition(":")
    register(getattr(importlib.import_module(f"{__package__}.{module}"), declaration)())
HOME = FORMATS["aayn"]


def exports() -> tuple[str, ...]:
    return tuple(name for name, entry in FORMATS.items() if entry.direction == "out")


def imports() -> tuple[str, ...]:
    return tuple(name for name, entry in FORMATS.items() if entry.direction == "in")


def folder_format(folder: str | Path) -> Format:
    """The format of the folder `folder`: the first translated format whose files it holds, else aayn's own (whose
    checks say what is wrong with a folder that is not one)."""
    folder = Path(folder).expanduser()
    translated = (entry for entry in FORMATS.values() if entry.translates and entry.holds(folder))
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
