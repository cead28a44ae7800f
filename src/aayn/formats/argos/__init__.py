"""The Argos Translate package (`aayn export --format argos --output NAME.argosmodel`), which Argos Translate and
LibreTranslate install: a zip of one folder holding a CTranslate2 model, the SentencePiece model, metadata.json and
the model card (`aayn.formats.argos.writer`). aayn does not translate it: its CTranslate2 export is the same model."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ..base import Format, aayn_source
from ..ctranslate2 import check_quantization


class ArgosPackage(Format):
    name, title, direction, extra = "argos", "Argos Translate", "out", "argos"
    writes, output_metavar = "file", "FILE.argosmodel"
    arguments = {
        "--source_lang": dict(help="argos: default: the model card's"),
        "--target_lang": dict(help="argos: default: the model card's"),
        "--source_name": dict(help="argos: default: the language's English name"),
        "--target_name": dict(help="argos: the same"),
        "--package_version": dict(help="argos: default: 1.0"),
        "--quantization": dict(help="argos: as ctranslate2"),
    }

    def check_output(self, output: Path) -> None:
        if output.suffix != ".argosmodel":
            raise ValueError(f"--output {output}: an Argos Translate package is a .argosmodel file")
        super().check_output(output)

    def load(self, source: Path, **options):
        check_quantization(options.get("quantization"))
        return self.part("writer").argos_source(aayn_source(source), **options)

    @contextlib.contextmanager
    def staged(self, output: Path) -> Iterator[Path]:
        with self.part("writer").zipped_package(output) as parts:
            yield parts

    def write_files(self, staging: Path, loaded, quantization: str | None = None, **package) -> None:
        self.part("writer").write_package(staging, loaded, quantization)

    def write_companions(self, staging: Path, loaded, output: Path) -> None:
        card = loaded.model_dir / "README.md"
        if card.is_file():
            (staging / loaded.package_name / "README.md").write_bytes(card.read_bytes())
