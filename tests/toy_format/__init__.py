"""A toy format, a room as aayn's own (`aayn/formats/<name>/`): this declaration, and its engine beside it
(`engine.py`); registered by importing the room. A folder holding `reversed.json` is one. What adding a format to
aayn takes: a room like this one and one registry line (tests/test_formats.py)."""

from pathlib import Path

from aayn.formats import FORMATS, Format, register


class ReversedFolder(Format):
    name, title, direction = "reversed", "Reversed", "out"
    files = ("reversed.json",)
    abilities = frozenset({"scores"})
    engine_class = "ReversedTranslator"
    arguments = {"--note": dict(help="reversed: a note kept in reversed.json")}

    def load(self, source: Path, note=None):
        from aayn.formats.base import aayn_source

        return aayn_source(source)

    def write_files(self, staging: Path, loaded, note=None) -> None:
        (staging / "reversed.json").write_text(f'{{"from": "{loaded.name}", "note": "{note or ""}"}}\n')


if "reversed" not in FORMATS:
    register(ReversedFolder())
