"""The ONNX folder (`aayn export --format onnx`): an encoder graph and two decoder graphs (the first step, and a
step with the cache) beside aayn's companions; translated by `aayn.formats.onnx.engine.OnnxTranslator`, which runs
aayn's own search in numpy over ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

from ...companions import write_beside_weights
from ..base import Format, aayn_source


class OnnxFolder(Format):
    name, title, direction, extra = "onnx", "ONNX", "out", "onnx"
    files = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
    abilities = frozenset({"scores"})  # scoring pairs: teacher-forced through the first-step graph
    setup = True  # its tokenizer is read with transformers (an imported folder's is aayn's own class)
    devices = ("cpu",)  # ONNX Runtime's CPU provider
    arguments = {"--quantization": dict(help="onnx: int8 (ONNX Runtime's dynamic quantization)")}

    def engine(self):
        from .engine import OnnxTranslator

        return OnnxTranslator

    def load(self, source: Path, quantization: str | None = None):
        from .writer import onnx_source

        source = aayn_source(source)
        return (source, *onnx_source(source, quantization))

    def write_files(self, staging: Path, loaded, quantization: str | None = None) -> None:
        from .writer import write_onnx

        write_onnx(staging, loaded[1], quantization)

    def write_companions(self, staging: Path, loaded, output: Path) -> None:
        source, model, tokenizer = loaded
        write_beside_weights(staging, model, tokenizer, source)
