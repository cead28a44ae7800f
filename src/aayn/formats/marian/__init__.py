"""transformers' MarianMTModel folders, in (`aayn import marian FOLDER_OR_HUB_ID --output_dir FOLDER`): Helsinki-NLP's
OPUS-MT models and any other `MarianMTModel`, read by `reader.py` and written as an aayn folder whose logits are
transformers' own, with the Marian tokenizer beside it."""

from __future__ import annotations

from pathlib import Path

from ..aayn import AaynFolder, SavedModel
from ..base import Format


class MarianFolder(Format):
    name, title, direction, extra = "marian", "Marian", "in", "import"
    source_help = "MarianMTModel folder or Hub id (OPUS-MT)"
    arguments = {
        "--source_lang": dict(help="default: the checkpoint's"),
        "--target_lang": dict(help="default: the checkpoint's"),
    }

    def load(self, source, **options):
        return self.part("reader").read_marian(str(source), **options)

    def write_files(self, staging: Path, loaded, **options) -> None:
        """The provenance, then the aayn folder's files as every aayn folder's (the Marian tokenizer's own)."""
        self.part("reader").write_provenance(staging, loaded)
        AaynFolder.write_into(staging, SavedModel(loaded.model, loaded.tokenizer))

    def write_companions(self, staging: Path, loaded, output: Path) -> None:
        self.part("reader").write_import_card(staging, loaded, output.name)
