"""The CTranslate2 folder (`aayn export --format ctranslate2`): CTranslate2's model.bin, vocabularies and
config.json beside aayn's companions; translated by `aayn.formats.ctranslate2.engine.ExportedModel` without torch or
transformers."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ... import MissingExtra
from ..base import Format, aayn_source
from ..companions import write_beside_weights

QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16")
# the rules of CTranslate2's beam search (its `decoding.cc`), which its folders state (`writer.state_rules`): of 2k
# candidates, an eos among the first k finishes a hypothesis, and a sentence is done once k have finished (patience
# 1); finished hypotheses rank by log P / |Y|^alpha, |Y| counting eos (with `return_end_token`): fairseq's rules
CT2_RULES = {"length_normalization": "fairseq", "search_early_stopping": True}


def import_ctranslate2():
    try:
        import ctranslate2
    except ImportError as error:
        raise MissingExtra("CTranslate2 models need the ctranslate2 package: pip install 'aayn[ct2]'") from error
    return ctranslate2


def check_quantization(quantization: str | None) -> None:
    if quantization not in (None, *QUANTIZATIONS):
        raise ValueError(f"--quantization {quantization}: CTranslate2 takes one of {', '.join(QUANTIZATIONS)}")


class Loaded(NamedTuple):
    """What a CTranslate2 folder is written from: the aayn folder (None: a model in memory), its model and
    tokenizer, and the (source, target) tokens in id order."""

    source: Path | None
    model: object
    tokenizer: object
    tokens: list[str]
    target_tokens: list[str]


class CTranslate2Folder(Format):
    name, title, direction, extra = "ctranslate2", "CTranslate2", "out", "ct2"
    files = ("model.bin",)
    abilities = frozenset({"alignment", "sampling"})  # alignments: the export's own, the last layer, all heads
    engine_class = "ExportedModel"
    arguments = {
        "--quantization": dict(
            help=f"ctranslate2: weight type, one of {', '.join(QUANTIZATIONS)} (default: float32, outputs equal to "
            "PyTorch's)"
        )
    }

    def runs_here(self, device: str, quantization: str | None = None) -> bool:
        try:
            ctranslate2 = import_ctranslate2()
            return (quantization or "float32") in ctranslate2.get_supported_compute_types(device.split(":")[0])
        except (ImportError, RuntimeError, ValueError):  # not installed; a CPU-only CTranslate2 on a GPU machine
            return False

    def load(self, source, quantization: str | None = None) -> Loaded:
        """`source`: an aayn folder, or a `SavedModel` in memory (the bench's, the tests')."""
        from ..aayn import SavedModel

        import_ctranslate2()
        check_quantization(quantization)
        if isinstance(source, SavedModel):
            model, tokenizer, source = source.model, source.tokenizer, None
        else:
            from transformers import AutoTokenizer

            from ...model.modeling_aayn import AaynForConditionalGeneration

            source = aayn_source(source)
            model = AaynForConditionalGeneration.from_pretrained(source)
            tokenizer = AutoTokenizer.from_pretrained(source)
        return Loaded(source, model, tokenizer, *self.part("writer").vocabularies(tokenizer))

    def write_files(self, staging: Path, loaded: Loaded, quantization: str | None = None) -> None:
        writer = self.part("writer")
        writer.write_ctranslate2(loaded.model, loaded.tokens, staging, quantization, loaded.target_tokens)

    def write_companions(self, staging: Path, loaded: Loaded, output: Path) -> None:
        write_beside_weights(staging, loaded.model, loaded.tokenizer, loaded.source, config=False)  # it has its own
        self.part("writer").state_rules(staging / "generation_config.json", loaded.model.config)
