"""fairseq's Transformer checkpoints, in (`aayn import fairseq CHECKPOINT.pt --output_dir FOLDER`): read by
`aayn.formats.fairseq.reader`, written as an aayn folder that decodes as `fairseq-interactive` does by default."""

from __future__ import annotations

from pathlib import Path

from ..aayn import AaynFolder, SavedModel
from ..base import Format


class FairseqCheckpoint(Format):
    name, title, direction, extra = "fairseq", "fairseq", "in", "import"
    source_help = "fairseq checkpoint (.pt) of a Transformer, fairseq 0.9 to 0.12"
    arguments = {
        "--source_lang": dict(help="default: the checkpoint's"),
        "--target_lang": dict(help="default: the checkpoint's"),
        "--source_dictionary": dict(help="default: dict.SOURCE_LANG.txt beside the checkpoint"),
        "--target_dictionary": dict(help="default: dict.TARGET_LANG.txt beside the checkpoint"),
        "--sentencepiece_model": dict(help="default: sentencepiece.bpe.model beside the checkpoint"),
        "--bpe_codes": dict(help="subword-nmt codes (after Moses); default: bpecodes beside it"),
    }

    def load(self, source: Path, **options):
        return self.part("reader").read_fairseq(Path(source).expanduser(), **options)

    def write_files(self, staging: Path, loaded, **options) -> None:
        """The tokenizer's sources and the provenance, then the aayn folder's files as every aayn folder's."""
        tokenizer = self.part("reader").write_import(staging, loaded)
        AaynFolder.write_into(staging, SavedModel(loaded.model, tokenizer))

    def write_companions(self, staging: Path, loaded, output: Path) -> None:
        self.part("reader").write_import_card(staging, loaded, output.name)


def import_fairseq(checkpoint: str | Path, output_dir: str | Path, **options) -> Path:
    """The aayn folder of a fairseq Transformer checkpoint (model, config, generation config, tokenizer, card),
    written whole or not at all; `options`: `FairseqCheckpoint.arguments`' keys."""
    return FairseqCheckpoint().write(checkpoint, output_dir, **options)
