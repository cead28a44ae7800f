"""A toy format, registered by importing this module: a folder holding `reversed.json`, whose engine translates a
text into the text reversed and scores a pair 0 where the target is the source reversed (-1 a token elsewhere).
What adding a format to aayn takes: one `Format` subclass and one `register` line (tests/test_formats.py)."""

from pathlib import Path

from aayn.formats import FORMATS, Format, register
from aayn.translation.translator import Translator


class ReversedTranslator(Translator):
    kind = "reversed"
    abilities = frozenset({"scores"})

    def __init__(self, folder, device: str = "cpu", threads=None):
        if device != "cpu":
            raise ValueError(f"--device {device}: the reversing engine runs on cpu")
        self.name = str(folder)
        self.generation = {}

    def encode(self, texts):
        return [[ord(character) for character in text] + [0] for text in texts]  # 0: the end of the text

    encode_targets = encode

    def decode_batch(self, sources, settings, prefixes, terms=None, alignment=None):
        return [[(0.0, "".join(chr(i) for i in reversed(ids[:-1])))] * settings.nbest for ids in sources]

    def score_batch(self, sources, targets):
        return [[0.0 if target[:-1] == source[-2::-1] else -1.0 for _ in target]
                for source, target in zip(sources, targets)]  # fmt: skip


class ReversedFolder(Format):
    name, title, direction = "reversed", "Reversed", "out"
    files = ("reversed.json",)
    abilities = frozenset({"scores"})
    arguments = {"--note": dict(help="reversed: a note kept in reversed.json")}

    def engine(self):
        return ReversedTranslator

    def load(self, source: Path, note=None):
        from aayn.formats.base import aayn_source

        return aayn_source(source)

    def write_files(self, staging: Path, loaded, note=None) -> None:
        (staging / "reversed.json").write_text(f'{{"from": "{loaded.name}", "note": "{note or ""}"}}\n')


if "reversed" not in FORMATS:
    register(ReversedFolder())
