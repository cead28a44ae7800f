"""Where modules were before the house was laid out in rooms: each old import path names the module in its new
room, the same module object (one class, one place to patch), imported only when asked for. The README, the docs,
saved folders and users' scripts name these paths; nothing here is imported until one of them is."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path

MOVED = {
    # the translation path's room (`aayn.translation`)
    "aayn.translator": "aayn.translation.translator",
    "aayn.opening": "aayn.translation.opening",
    "aayn.scoring": "aayn.translation.scoring",
    "aayn.alignment": "aayn.translation.alignment",
    "aayn.markup": "aayn.translation.markup",
    "aayn.sentences": "aayn.translation.sentences",
    "aayn.bulk": "aayn.translation.bulk",
    "aayn.bulk_ray": "aayn.translation.bulk_ray",
    "aayn.evaluation": "aayn.translation.evaluation",
    "aayn.documents": "aayn.translation.documents",
    # each format's room (`aayn.formats.<format>`)
    "aayn.translate": "aayn.formats.aayn.engine",
    "aayn.formats.aayn_folder": "aayn.formats.aayn",
    "aayn.ct2": "aayn.formats.ctranslate2.engine",
    "aayn.export": "aayn.formats.ctranslate2.writer",
    "aayn.formats.ctranslate2_folder": "aayn.formats.ctranslate2",
    "aayn.onnx_engine": "aayn.formats.onnx.engine",
    "aayn.onnx_export": "aayn.formats.onnx.writer",
    "aayn.formats.onnx_folder": "aayn.formats.onnx",
    "aayn.argos_export": "aayn.formats.argos.writer",
    "aayn.formats.argos_package": "aayn.formats.argos",
    "aayn.fairseq_import": "aayn.formats.fairseq.reader",
    "aayn.formats.fairseq_checkpoint": "aayn.formats.fairseq",
    # the model's files, before they moved into `aayn.model` (saved folders carry them as `*_aayn.py`)
    **{f"aayn.{path.stem}": f"aayn.model.{path.stem}" for path in (Path(__file__).parent / "model").glob("*_aayn.py")},
}


def new_name(name: str) -> str:
    """The module `name` is now (itself where it did not move); a module inside a moved package moved with it."""
    if not name.startswith("aayn."):
        return name
    for old in _LONGEST_FIRST:
        if name == old or name.startswith(old + "."):
            return MOVED[old] + name[len(old) :]
    return name


_LONGEST_FIRST = sorted(MOVED, key=len, reverse=True)


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old path with the module at its new one; first among the finders, so that a module inside a
    moved package (`aayn.documents.office`) is the new one too, not a second copy read from the same file."""

    def find_spec(self, fullname, path, target=None):
        if new_name(fullname) != fullname:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(new_name(spec.name))
        self._spec = module.__spec__  # the import system sets the alias's spec on it; put the module's own back
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())
