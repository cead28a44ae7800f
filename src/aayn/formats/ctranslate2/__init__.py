"""The CTranslate2 folder (`aayn export --format ctranslate2`): CTranslate2's model.bin, vocabularies and
config.json beside aayn's companions; translated by `aayn.formats.ctranslate2.engine.ExportedModel` without torch or
transformers."""

from __future__ import annotations

from pathlib import Path

from ...companions import write_beside_weights
from ..base import Format, aayn_source

QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16")


class CTranslate2Folder(Format):
    name, title, direction, extra = "ctranslate2", "CTranslate2", "out", "ct2"
    files = ("model.bin",)
    abilities = frozenset({"alignment"})  # the export's own: the last layer, all heads
    arguments = {
        "--quantization": dict(
            help=f"ctranslate2: weight type, one of {', '.join(QUANTIZATIONS)} (default: float32, outputs equal to "
            "PyTorch's)"
        )
    }

    def engine(self):
        from .engine import ExportedModel

        return ExportedModel

    def load(self, source: Path, quantization: str | None = None):
        from transformers import AutoTokenizer

        from ...model.modeling_aayn import AaynForConditionalGeneration
        from .engine import import_ctranslate2
        from .writer import vocabularies

        import_ctranslate2()
        if quantization not in (None, *QUANTIZATIONS):
            raise ValueError(f"--quantization {quantization}: CTranslate2 takes one of {', '.join(QUANTIZATIONS)}")
        source = aayn_source(source)
        model = AaynForConditionalGeneration.from_pretrained(source)
        tokenizer = AutoTokenizer.from_pretrained(source)
        return source, model, tokenizer, vocabularies(tokenizer)

    def write_files(self, staging: Path, loaded, quantization: str | None = None) -> None:
        from .writer import write_ctranslate2

        _, model, _, (tokens, target_tokens) = loaded
        write_ctranslate2(model, tokens, staging, quantization, target_tokens)

    def write_companions(self, staging: Path, loaded, output: Path) -> None:
        source, model, tokenizer, _ = loaded
        write_beside_weights(staging, model, tokenizer, source, config=False)  # CTranslate2 has its own config
        state_rules(staging / "generation_config.json", model.config)


def state_rules(path: Path, config) -> None:
    """The search rules the folder decodes by, into its generation config: the model's length limit, and
    CTranslate2's own beam-search rules (`aayn.formats.ctranslate2.engine.CT2_RULES`), with one line where they differ
    from the model's."""
    import json

    from .engine import CT2_RULES
    from .writer import logger

    settings = json.loads(path.read_text(encoding="utf-8"))
    if getattr(config, "length_limit", None) is not None:
        settings["length_limit"] = list(config.length_limit)
    stated = {key: getattr(config, key, None) for key in CT2_RULES}
    if stated != CT2_RULES and (settings.get("num_beams") or 1) > 1:
        logger.warning(
            "CTranslate2 runs a beam search by its own rules (fairseq's: log P / |Y|^alpha, stopping at k finished "
            "hypotheses), not the model's (GNMT's lp, the exact stop): beam outputs may differ; greedy ones do not"
        )
    settings.update(CT2_RULES)
    path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
