"""The ONNX folder (`aayn export --format onnx`): an encoder graph and two decoder graphs (the first step, and a
step with the cache) beside aayn's companions; translated by `aayn.formats.onnx.engine.OnnxTranslator`, which runs
aayn's own search in numpy over ONNX Runtime."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ... import MissingExtra
from ..base import Format, aayn_source
from ..companions import write_beside_weights


def import_onnxruntime():
    try:
        import onnxruntime
    except ImportError as error:
        raise MissingExtra("ONNX models need onnxruntime: pip install 'aayn[onnx]'") from error
    return onnxruntime


class Loaded(NamedTuple):
    """What an ONNX folder is written from: the aayn folder, its model (float32, eager attention) and tokenizer."""

    source: Path
    model: object
    tokenizer: object


class OnnxFolder(Format):
    name, title, direction, extra = "onnx", "ONNX", "out", "onnx"
    files = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
    abilities = frozenset({"scores"})  # scoring pairs: teacher-forced through the first-step graph
    setup = True  # its tokenizer is read with transformers (an imported folder's is aayn's own class)
    devices = ("cpu",)  # ONNX Runtime's CPU provider
    arguments = {"--quantization": dict(help="onnx: int8 (ONNX Runtime's dynamic quantization)")}
    engine_class = "OnnxTranslator"

    def runs_here(self, device: str, quantization: str | None = None) -> bool:
        try:
            import onnxruntime  # noqa: F401
            import onnxscript  # noqa: F401  torch.onnx's exporter
        except ImportError:
            return False
        return super().runs_here(device, quantization)

    def requantize(self, exported: Path, output: Path, quantization: str) -> Path | None:
        return self.part("writer").quantized_copy(exported, output) if quantization == "int8" else None

    def load(self, source: Path, quantization: str | None = None) -> Loaded:
        source = aayn_source(source)
        return Loaded(source, *self.part("writer").onnx_source(source, quantization))

    def write_files(self, staging: Path, loaded: Loaded, quantization: str | None = None) -> None:
        self.part("writer").write_onnx(staging, loaded.model, quantization)

    def write_companions(self, staging: Path, loaded: Loaded, output: Path) -> None:
        write_beside_weights(staging, loaded.model, loaded.tokenizer, loaded.source)
