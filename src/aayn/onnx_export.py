"""`aayn export --format onnx`: the model as ONNX graphs for ONNX Runtime (browsers, phones, other languages).

The layout is the one `optimum` writes for seq2seq models (its `ORTModelForSeq2SeqLM` loads Marian's so):
`encoder_model.onnx` (input_ids, attention_mask -> last_hidden_state), `decoder_model.onnx` (the first step:
input_ids, encoder_attention_mask, encoder_hidden_states -> logits and every layer's keys and values,
`present.N.decoder.key` ... `present.N.encoder.value`) and `decoder_with_past_model.onnx` (later steps: one token a
row and `past_key_values.N.*` -> logits and the grown self-attention keys and values), batch and lengths dynamic,
with the config, generation config and tokenizer beside them. optimum-onnx needs transformers < 4.58, so this
module's own `OnnxModel` runs the graphs with `onnxruntime` sessions (greedy search and §6.1's beam search).
The graphs are exported with torch's exporter from the model's own modules (eager attention), over a stand-in for
the transformers cache that holds plain tensors: the same code that `generate()` runs. Needs `aayn[onnx]`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers.utils import logging

from . import MissingExtra
from .policy_aayn import (
    PAPER_LENGTH_PENALTY,
    PAPER_NUM_BEAMS,
    beams_for,
    gnmt_length_penalty,
    length_penalty_in_force,
    paper_length_limit,
)
from .translator import DECODING_BATCH_TOKENS

logger = logging.get_logger(__name__)

OPSET = 18
FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")


def import_onnxruntime():
    try:
        import onnxruntime
    except ImportError as error:
        raise MissingExtra("ONNX models need onnxruntime: pip install 'aayn[onnx]'") from error
    return onnxruntime


class _Layers:
    """The keys and values of one attention kind per layer, as the decoder's attention modules use a transformers
    cache: `update` (self-attention: past tensors in, present tensors out) and `layers[i].keys` (cross-attention:
    the encoder's keys and values as the first step gave them)."""

    def __init__(self, past: list[tuple[torch.Tensor, torch.Tensor]] | None, count: int, layers=()):
        self.present: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * count
        self.past = past
        self.layers = [_Layer(*kv) for kv in layers]

    def update(self, key: torch.Tensor, value: torch.Tensor, index: int):
        if self.past is not None:  # self-attention: the step's keys and values after the past ones
            past_key, past_value = self.past[index]
            key, value = torch.cat([past_key, key], dim=2), torch.cat([past_value, value], dim=2)
        self.present[index] = key, value
        return key, value


class _Layer:
    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values


class _TensorCache:
    """What aayn's decoder reads of an `EncoderDecoderCache`, over tensors the graphs take and give."""

    def __init__(self, count: int, self_past=None, cross_past=None):
        self.self_attention_cache = _Layers(self_past, count)
        self.cross_attention_cache = _Layers(None, count, cross_past or ())  # later steps: the first step's
        self.is_updated = {i: cross_past is not None for i in range(count)}
        self.past_length = self_past[0][0].shape[2] if self_past else 0

    def get_seq_length(self, layer_idx: int = 0):
        return self.past_length


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
            outputs += cache.self_attention_cache.present[i]
            if not self.with_past:
                outputs += cache.cross_attention_cache.present[i]
        return tuple(outputs)


def cache_names(count: int, prefix: str, cross: bool = True) -> list[str]:
    kinds = ("decoder", "encoder") if cross else ("decoder",)
    return [f"{prefix}.{i}.{kind}.{part}" for i in range(count) for kind in kinds for part in ("key", "value")]


def export_graphs(model, folder: Path) -> None:
    """The three graphs of `model` (in float32, eval) into `folder`, with dynamic batch and lengths."""
    from torch.export import Dim

    config, count = model.config, model.config.decoder_layers
    batch, source, target, past = Dim("batch", max=1 << 16), Dim("source"), Dim("target"), Dim("past")
    ids = torch.tensor([[5, 6, 7, 2], [8, 9, 2, config.pad_token_id]]) % config.vocab_size
    mask = (ids != config.pad_token_id).long()
    for module in (model.get_encoder().embed, model.get_decoder().embed):
        module.warned_of_length = True  # a graph has no place for a warning; `OnnxModel` stops at the limit
    with torch.no_grad():
        hidden = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        start = torch.full((2, 3), config.decoder_start_token_id)
        first = _Decoder(model, False)(start, mask, hidden)
    export = lambda module, args, names, outputs, shapes, path: torch.onnx.export(
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


def save_onnx(model_dir: str | Path, output_dir: str | Path, quantization: str | None = None) -> Path:
    """The saved aayn folder `model_dir` as ONNX graphs in a new `output_dir`, written whole or not at all."""
    from transformers import AutoTokenizer

    from .data.tokenizer import save_tokenizer
    from .folders import check_new_folder, staged_folder
    from .modeling_aayn import AaynForConditionalGeneration

    import_onnxruntime()
    if quantization not in (None, "int8"):
        raise ValueError(f"--quantization {quantization}: ONNX export quantizes to int8 (ONNX Runtime's dynamic) only")
    output_dir = Path(output_dir)
    check_new_folder(output_dir)
    model = AaynForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.config._attn_implementation = "eager"  # plain matrix products and a softmax: every runtime has them
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with staged_folder(output_dir) as staging:
        export_graphs(model, staging)
        if quantization:
            quantize_int8(staging)
        model.config.save_pretrained(staging)
        model.generation_config.save_pretrained(staging)
        save_tokenizer(tokenizer, staging)
        record = {"opset": OPSET, "quantization": quantization, "files": list(FILES), "torch": torch.__version__}
        (staging / "onnx_export.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    logger.info(f"ONNX graphs (opset {OPSET}) written to {output_dir}")
    return output_dir


def top_in_order(values: np.ndarray, count: int) -> np.ndarray:
    """Per row, the indices of the `count` largest values, largest first, equal values by index: the first
    `count` of a stable descending sort, without sorting the whole row (a partition, then `count` values)."""
    kth = -np.partition(-values, count - 1, axis=1)[:, count - 1 : count]  # each row's count-th largest
    above = values > kth
    ties = (values == kth) & (np.cumsum(values == kth, axis=1) <= count - above.sum(1, keepdims=True))
    chosen = np.nonzero(above | ties)[1].reshape(values.shape[0], count)  # ascending indices, `count` a row
    ranks = np.argsort(-np.take_along_axis(values, chosen, 1), axis=1, kind="stable")
    return np.take_along_axis(chosen, ranks, 1)


class OnnxModel:
    """An exported folder's three graphs in ONNX Runtime sessions: greedy search and §6.1's beam search with
    aayn's rules (the source's length + 50 tokens, eos counted; GNMT's length penalty; fairseq's candidate rule),
    in numpy around the sessions."""

    def __init__(self, folder: str | Path, threads: int | None = None):
        onnxruntime = import_onnxruntime()
        folder = Path(folder)
        for name in FILES:
            if not (folder / name).is_file():
                raise FileNotFoundError(f"--model {folder}: no {name} (`aayn export --format onnx` writes it)")
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.encoder, self.first, self.later = (
            onnxruntime.InferenceSession(str(folder / name), options, providers=["CPUExecutionProvider"])
            for name in FILES
        )
        self.folder = folder
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.layers, self.start = config["decoder_layers"], config["decoder_start_token_id"]
        self.eos, self.pad = config["eos_token_id"], config["pad_token_id"]
        path = folder / "generation_config.json"
        self.generation = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})[0]

    def _decoding(self, input_ids: np.ndarray, attention_mask: np.ndarray, copies: int):
        """The first step's logits for `copies` rows a sentence, and a function giving the next step's logits from
        each row's next token and the rows (of the previous step) it continues."""
        hidden = self.encode(input_ids, attention_mask)
        mask = np.repeat(attention_mask, copies, 0)
        start = np.full((mask.shape[0], 1), self.start, dtype=np.int64)
        feed = {
            "input_ids": start,
            "encoder_attention_mask": mask,
            "encoder_hidden_states": np.repeat(hidden, copies, 0),
        }
        outputs = self.first.run(None, feed)
        cross = [outputs[1 + 4 * i + 2 : 1 + 4 * i + 4] for i in range(self.layers)]
        past = [outputs[1 + 4 * i : 1 + 4 * i + 2] for i in range(self.layers)]

        def step(words: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
            nonlocal past
            feed = {"input_ids": words[:, None].astype(np.int64), "encoder_attention_mask": mask}
            for i in range(self.layers):
                key, value = (tensor if rows is None else tensor[rows] for tensor in past[i])
                feed[f"past_key_values.{i}.decoder.key"], feed[f"past_key_values.{i}.decoder.value"] = key, value
                feed[f"past_key_values.{i}.encoder.key"], feed[f"past_key_values.{i}.encoder.value"] = cross[i]
            outputs = self.later.run(None, feed)
            past = [outputs[1 + 2 * i : 3 + 2 * i] for i in range(self.layers)]
            return outputs[0][:, -1]

        return outputs[0][:, -1], step

    def greedy(self, input_ids: np.ndarray, attention_mask: np.ndarray, max_new_tokens: int | None = None):
        """(B, 1 + steps) token ids, the decoder start first, padding after each row's eos."""
        input_ids, attention_mask = input_ids.astype(np.int64), attention_mask.astype(np.int64)
        limits = paper_length_limit(attention_mask.sum(1))  # each row's
        limits = limits if max_new_tokens is None else np.minimum(limits, max_new_tokens)
        logits, step = self._decoding(input_ids, attention_mask, 1)
        tokens = np.full((input_ids.shape[0], 1), self.start, dtype=np.int64)
        done = np.zeros(input_ids.shape[0], dtype=bool)
        for position in range(int(limits.max())):
            chosen = np.where(position < limits - 1, logits.argmax(-1), self.eos)  # eos at a row's limit
            chosen = np.where(done, self.pad, chosen)
            tokens = np.concatenate([tokens, chosen[:, None]], axis=1)
            done |= chosen == self.eos
            if done.all():
                break
            logits = step(chosen, None)
        return tokens

    def beam(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        num_beams: int = PAPER_NUM_BEAMS,
        alpha: float = PAPER_LENGTH_PENALTY,
    ):
        """§6.1's beam search as aayn's `paper_search` runs it: per step the 2k best candidates by log P, those
        ending in eos among the first k finish (scored log P / ((5 + |Y|) / 6)^alpha), the best k others live on;
        pad never, eos forced at a sentence's limit; a sentence stops once no live beam can beat its best finished
        hypothesis (alpha >= 0). Per row, the best hypothesis's ids: the decoder start first, eos last."""
        n, k = input_ids.shape[0], num_beams
        input_ids, attention_mask = input_ids.astype(np.int64), attention_mask.astype(np.int64)
        limits = paper_length_limit(attention_mask.sum(1))
        logits, step = self._decoding(input_ids, attention_mask, k)
        history = np.full((n * k, 1), self.start, dtype=np.int64)
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        scores[:, 0] = 0.0  # one live beam at the start
        best, found, done = np.full(n, -np.inf), [[self.start, self.eos] for _ in range(n)], np.zeros(n, dtype=bool)
        for length in range(1, int(limits.max()) + 1):
            shifted = logits.astype(np.float32) - logits.max(-1, keepdims=True)
            log_probs = (shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))).reshape(n, k, -1)
            if self.pad != self.eos:
                log_probs[:, :, self.pad] = -np.inf
            at_limit = length >= limits
            log_probs[at_limit] = np.where(np.arange(log_probs.shape[-1]) == self.eos, log_probs[at_limit], -np.inf)
            candidates = (scores[:, :, None] + log_probs).reshape(n, -1)
            order = top_in_order(candidates, 2 * k)
            values, (parents, words) = np.take_along_axis(candidates, order, 1), np.divmod(order, log_probs.shape[-1])
            # fairseq's rule, for all sentences at once: an eos among the first k candidates finishes a hypothesis
            # (the first such is the best: candidates are sorted), the first k others live on
            valid, ends = values > -np.inf, words == self.eos
            finishing = valid & ends & (np.arange(2 * k) < k) & ~done[:, None]
            first = finishing.argmax(1)
            normalized = np.take_along_axis(values, first[:, None], 1)[:, 0] / gnmt_length_penalty(length, alpha)
            for i in np.flatnonzero(finishing.any(1) & (normalized > best)):
                best[i], found[i] = normalized[i], [*history[i * k + parents[i, first[i]]].tolist(), self.eos]
            continuing = valid & ~ends & ~done[:, None]
            picks = np.argsort(~continuing, axis=1, kind="stable")[:, :k]  # the first k continuing, in order
            taken = np.take_along_axis(continuing, picks, 1)
            scores = np.where(taken, np.take_along_axis(values, picks, 1), -np.inf).astype(np.float32)
            chosen = np.where(taken, np.take_along_axis(parents, picks, 1), 0)
            next_words = np.where(taken, np.take_along_axis(words, picks, 1), self.pad)
            bound = scores.max(1) / gnmt_length_penalty(limits, alpha) if alpha >= 0 else np.inf
            done |= ~taken.any(1) | (best >= bound)
            if done.all():
                break
            rows = (np.arange(n)[:, None] * k + chosen).reshape(-1)
            history = np.concatenate([history[rows], next_words.reshape(-1, 1)], axis=1)
            logits = step(next_words.reshape(-1), rows)
        return found

    def translate(self, texts: list[str], batch_tokens: int = DECODING_BATCH_TOKENS, num_beams: int | None = None,
                  length_penalty: float | None = None) -> list[str]:  # fmt: skip
        """Translations of `texts`, in input order, batched as `aayn translate` batches (similar lengths,
        `batch_tokens` padded tokens a batch), with the folder's tokenizer; beam size and alpha those of the
        folder's generation config unless given (1 beam: greedy); a blank line gives an empty one."""
        from transformers import AutoTokenizer

        from .data.token_batches import decoding_batches, encode_sources

        if not hasattr(self, "tokenizer"):
            self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        beams = beams_for(num_beams or self.generation.get("num_beams"))
        alpha = length_penalty_in_force(length_penalty, self.generation.get("length_penalty"))
        outputs = [""] * len(texts)
        encode = lambda batch: self.tokenizer(batch)["input_ids"]
        todo, encoded = encode_sources(encode, texts, self.tokenizer.model_max_length)
        for batch in decoding_batches([len(ids) for ids in encoded], batch_tokens) if todo else []:
            width = max(len(encoded[j]) for j in batch)
            ids = np.array([encoded[j] + [self.pad] * (width - len(encoded[j])) for j in batch], dtype=np.int64)
            mask = (ids != self.pad).astype(np.int64)
            tokens = self.greedy(ids, mask) if beams == 1 else self.beam(ids, mask, beams, alpha)
            for j, row in zip(batch, self.tokenizer.batch_decode(tokens, skip_special_tokens=True)):
                outputs[todo[j]] = row.strip()
        return outputs
