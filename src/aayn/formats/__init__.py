"""The formats aayn writes, reads and translates, one room each (`aayn/formats/<name>/`: its `Format` declaration
in `__init__`, its writer or reader and its engine beside it; `base.Format` is the template all are written by):

- `aayn/`: aayn's own folder (torch), what training, `aayn average` and `aayn import` write;
- `ctranslate2/`, `onnx/`: `aayn export`s that aayn translates too;
- `argos/`: `aayn export --format argos`, for Argos Translate and LibreTranslate;
- `fairseq/`: `aayn import fairseq`.

`FORMATS` is the registry (`registry.py`): `aayn export` and `aayn import` are built from it (their choices and
arguments), `aayn.translation.opening` opens any `--model` through it, and adding a format is one room and one line
of `registry.ROOMS`. Reading it imports no heavy library: a format's writer and engine are imported when used.
"""

from .base import Format
from .fairseq import import_fairseq
from .registry import FORMATS, HOME, export_model, exports, folder_format, imports, register, unregister

__all__ = ["FORMATS", "HOME", "Format", "export_model", "exports", "folder_format", "import_fairseq", "imports",
           "register", "unregister"]  # fmt: skip
