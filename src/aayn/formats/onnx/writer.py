"""`aayn export --format onnx`: the model as ONNX graphs for ONNX Runtime (browsers, phones, other languages).

The layout is the one `optimum` writes for seq2seq models (its `ORTModelForSeq2SeqLM` loads Marian's so):
`encoder_model.onnx` (input_ids, attention_mask -> last_hidden_state), `decoder_model.onnx` (the first step:
input_ids, encoder_attention_mask, encoder_hidden_states -> logits and every layer's keys and values,
`present.N.decoder.key` ... `present.N.encoder.value`) and `decoder_with_past_model.onnx` (later steps: one token a
row and `past_key_values.N.*` -> logits and the grown self-attention keys and values), batch and lengths dynamic,
with what every exported folder carries beside them (`aayn.formats.companions.write_beside_weights`). optimum-onnx needs
transformers < 4.58, so aayn's own engine runs the graphs (`aayn.formats.onnx.engine.OnnxTranslator`).
The graphs are exported with torch's exporter from the model's own modules (eager attention), over a cache of the
model's protocol (`DecoderCache`) that holds plain tensors: the same code that `generate()` runs. Needs
`aayn[onnx]`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from torch import nn
from transformers.utils import logging

from ...model.cache_aayn import DecoderCache
from . import OnnxFolder, import_onnxruntime

FILES = OnnxFolder.files  # the encoder, the first decoder step, the later steps (with the cache)

logger = logging.get_logger(__name__)

OPSET = 18


class _TensorCache(DecoderCache):
    """The decoder's cache over the tensors the graphs take and give: `self_past` (later steps: each layer's past
    self-attention keys and values, this step's appended) and `cross_past` (later steps: the encoder's keys and
    values as the first step gave them); what a step computes is kept in `self_present` and `cross_present`."""

    def __init__(self, count: int, self_past=None, cross_past=None):
        self.self_past, self.cross_past = self_past, cross_past
        self.self_present: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * count
        self.cross_present: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * count

    def past_length(self):
        return self.self_past[0][0].shape[2] if self.self_past else 0

    def self_attention(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor):
        if self.self_past is not None:  # the step's keys and values after the past ones
            past_key, past_value = self.self_past[layer_idx]
            key, value = torch.cat([past_key, key], dim=2), torch.cat([past_value, value], dim=2)
        self.self_present[layer_idx] = key, value
        return key, value

    def cross_attention(self, layer_idx: int, project):
        if self.cross_past is not None:
            return self.cross_past[layer_idx]
        self.cross_present[layer_idx] = tuple(project())
        return self.cross_present[layer_idx]


class _Encoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class _Decoder(nn.Module):
    """One decoder call and the output layer; `with_past`: later steps, the cache as flat tensors."""

    def __init__(self, model, with_past: bool):
        super().__init__()
        self.model, self.with_past, self.count = model, with_past, model.config.decoder_layers

    def forward(self, input_ids, encoder_attention_mask, *tensors):
        if self.with_past:
            rows = [tensors[4 * i : 4 * i + 4] for i in range(self.count)]  # decoder key, value; encoder key, value
            cache = _TensorCache(self.count, [row[:2] for row in rows], [row[2:] for row in rows])
            encoder_key = rows[0][2]  # (B, nh, S, hs): the cross-attention masks need the source length only
            encoder_hidden_states = encoder_key.new_zeros(encoder_key.shape[0], encoder_key.shape[2], 1)
        else:
            cache, (encoder_hidden_states,) = _TensorCache(self.count), tensors
        states = self.model.get_decoder()(
            input_ids, encoder_hidden_states, None, encoder_attention_mask, past_key_values=cache
        ).last_hidden_state
        outputs = [self.model.lm_head(states)]
        for i in range(self.count):
            outputs += cache.self_present[i]
            if not self.with_past:
                outputs += cache.cross_present[i]
        return tuple(outputs)


def cache_names(count: int, prefix: str, cross: bool = True) -> list[str]:
    kinds = ("decoder", "encoder") if cross else ("decoder",)
    return [f"{prefix}.{i}.{kind}.{part}" for i in range(count) for kind in kinds for part in ("key", "value")]


def export_graphs(model, folder: Path, files: tuple[str, ...] = FILES) -> None:
    """The three graphs of `model` (in float32, eval) into `folder`, with dynamic batch and lengths (those of them
    named in `files`)."""
    from torch.export import Dim

    config, count = model.config, model.config.decoder_layers
    batch, source, target, past = Dim("batch", max=1 << 16), Dim("source"), Dim("target"), Dim("past")
    ids = torch.tensor([[5, 6, 7, 2], [8, 9, 2, config.pad_token_id]]) % config.vocab_size
    mask = (ids != config.pad_token_id).long()
    for module in (model.get_encoder().embed, model.get_decoder().embed):
        module.warned_of_length = True  # a graph has no place for a warning; `OnnxTranslator` stops at the limit
    with torch.no_grad():
        hidden = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        start = torch.full((2, 3), config.decoder_start_token_id)
        first = _Decoder(model, False)(start, mask, hidden)
    export = lambda module, args, names, outputs, shapes, path: path in files and torch.onnx.export(
        module.eval(), args, str(folder / path), input_names=names, output_names=outputs, dynamic_shapes=shapes,
        opset_version=OPSET, dynamo=True, external_data=False, verbose=False,
    )  # fmt: skip
    export(_Encoder(model), (ids, mask), ["input_ids", "attention_mask"], ["last_hidden_state"],
           ({0: batch, 1: source}, {0: batch, 1: source}), FILES[0])  # fmt: skip
    export(_Decoder(model, False), (start, mask, hidden),
           ["input_ids", "encoder_attention_mask", "encoder_hidden_states"],
           ["logits", *cache_names(count, "present")],
           ({0: batch, 1: target}, {0: batch, 1: source}, ({0: batch, 1: source},)), FILES[1])  # fmt: skip
    cache_shapes = [{0: batch, 2: past if kind == "decoder" else source}
                    for _ in range(count) for kind in ("decoder", "encoder") for _ in range(2)]  # fmt: skip
    step = torch.full((2, 1), 5)
    export(_Decoder(model, True), (step, mask, *first[1:]),
           ["input_ids", "encoder_attention_mask", *cache_names(count, "past_key_values")],
           ["logits", *cache_names(count, "present", cross=False)],
           ({0: batch}, {0: batch, 1: source}, tuple(cache_shapes)), FILES[2])  # fmt: skip


def quantize_int8(folder: Path) -> None:
    """ONNX Runtime's dynamic quantization: int8 weights of the matrix products, activations quantized per call."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    for name in FILES:
        path = folder / name
        quantized = path.with_suffix(".int8.onnx")
        quantize_dynamic(str(path), str(quantized), weight_type=QuantType.QInt8)
        quantized.replace(path)


def quantized_copy(exported: Path, output_dir: Path) -> Path:
    """A float32 ONNX export copied to `output_dir` with int8 weights: what `save_onnx(..., quantization="int8")`
    writes, without exporting the graphs a second time (torch.export takes most of an export's time)."""
    record = json.loads((exported / "onnx_export.json").read_text(encoding="utf-8"))
    if record["quantization"] is not None:
        raise ValueError(f"{exported} is already quantized ({record['quantization']})")
    shutil.copytree(exported, output_dir)
    quantize_int8(output_dir)
    record["quantization"] = "int8"
    (output_dir / "onnx_export.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return output_dir


def onnx_source(model_dir: Path, quantization: str | None = None):
    """(model, tokenizer) of the saved aayn folder, as the graphs are exported from it: float32, eval, eager
    attention (plain matrix products and a softmax: every runtime has them); one line where it cannot be."""
    from transformers import AutoTokenizer

    from ...model.modeling_aayn import AaynForConditionalGeneration

    import_onnxruntime()
    if quantization not in (None, "int8"):
        raise ValueError(f"--quantization {quantization}: ONNX export quantizes to int8 (ONNX Runtime's dynamic) only")
    model = AaynForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"
    return model, AutoTokenizer.from_pretrained(model_dir)


def write_onnx(staging: Path, model, quantization: str | None = None) -> None:
    """The three graphs (int8 weights with `quantization`) and `onnx_export.json` into `staging`."""
    export_graphs(model, staging)
    if quantization:
        quantize_int8(staging)
    record = {"opset": OPSET, "quantization": quantization, "files": list(FILES), "torch": torch.__version__}
    (staging / "onnx_export.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    logger.info(f"ONNX graphs (opset {OPSET}) written")
