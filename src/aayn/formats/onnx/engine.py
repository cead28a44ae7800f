"""The ONNX Runtime engine: a folder `aayn export --format onnx` wrote, translated, scored and served as the torch
model is, with §6.1's search run in numpy around three ONNX Runtime sessions (the encoder, the decoder's first step,
its later steps with the key/value cache).

The search keeps `aayn.model.search_aayn.paper_search`'s rules (fairseq's candidate rule: of the 2k best candidates by
log P, those ending in eos among the first k finish, scored log P / lp, and the best k others live on; pad never,
eos forced at a sentence's limit; greedy as tensor2tensor decodes with beam size 1) under the rules the folder
states (`DecodingSettings`: GNMT's or fairseq's lp, §6.1's limit of source + 50 tokens or a * source + b, the exact
stop, once the returned hypotheses beat what any live beam could still reach, or k finished, or transformers'
heuristic) and its economies: the first decoder step runs once per sentence (its beams are all the start token), a
sentence that is done leaves the batch and the caches, and the encoder's keys and values are only gathered again
when sentences leave.

What is one rule is one definition both searches read (`policy_aayn`: the length penalties, the limits, when a
sentence is done). The phases that choose and finish hypotheses are written again here in numpy (`Beams`,
`greedy_step`, `beam_step`, against `SearchState.finish` / `live_on`, `BeamSearch.live_on` and `_greedy_step`):
this engine imports no torch, as CTranslate2's does not, and numpy has no topk or gather on a device to share code
through. Their agreement is tested, not assumed: tests/test_onnx_export.py decodes with both (greedy token for
token, beam search under each stopping rule and alpha) and compares.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...model.policy_aayn import folder_rules, largest_length_penalty, length_penalty, search_done, source_limit
from ..translator import DecodingSettings, Translator
from . import OnnxFolder, import_onnxruntime

FILES = OnnxFolder.files  # the encoder, the first decoder step, the later steps (with the cache)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float32) - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def reordering(path: Path, layers: int) -> bytes:
    """The later steps' graph with the beams' reordering inside it: each past self-attention key and value is
    gathered by a new input, `beam_rows`, before the graph grows it (ONNX Runtime copies rows on its threads; numpy
    took a sixth of a beam search doing it on one). The exported file is left as optimum's layout has it."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(path))
    graph = model.graph
    reordered = {f"past_key_values.{i}.decoder.{part}" for i in range(layers) for part in ("key", "value")}
    gathers = []
    for value in graph.input:
        if value.name in reordered:
            gathers.append(helper.make_node("Gather", [f"{value.name}.previous", "beam_rows"], [value.name], axis=0))
            value.name = f"{value.name}.previous"
            value.type.tensor_type.shape.dim[0].dim_param = "previous_rows"
    graph.input.append(helper.make_tensor_value_info("beam_rows", TensorProto.INT64, ["rows"]))
    for node in reversed(gathers):
        graph.node.insert(0, node)
    return model.SerializeToString()


def candidates_graph():
    """A small graph of the search's scoring and choosing phases, run by ONNX Runtime beside the model's (its
    kernels are threaded and fused; numpy's passes over (rows, vocab) took most of a step): the rows' log-softmax,
    the banned tokens (`ban`: pad; `only_eos`: all but eos, for rows at their limit), plus each row's score, then
    per sentence (`shape`: sentences, -1) the `count` best candidates over its beams and words, largest first,
    equal values by index (ONNX's TopK), as `BeamSearch.step` chooses them."""
    from onnx import TensorProto, helper

    floats, longs = TensorProto.FLOAT, TensorProto.INT64
    nodes = [
        helper.make_node("LogSoftmax", ["logits"], ["log_probs"], axis=-1),
        helper.make_node("Where", ["at_limit", "only_eos", "ban"], ["bias"]),
        helper.make_node("Add", ["log_probs", "bias"], ["allowed"]),
        helper.make_node("Add", ["allowed", "scores"], ["scored"]),
        helper.make_node("Reshape", ["scored", "shape"], ["per_sentence"]),
        helper.make_node("TopK", ["per_sentence", "count"], ["values", "indices"], axis=-1, largest=1, sorted=1),
    ]
    inputs = [
        helper.make_tensor_value_info("logits", floats, ["rows", "vocab"]),
        helper.make_tensor_value_info("scores", floats, ["rows", 1]),
        helper.make_tensor_value_info("at_limit", TensorProto.BOOL, ["rows", 1]),
        helper.make_tensor_value_info("only_eos", floats, [1, "vocab"]),
        helper.make_tensor_value_info("ban", floats, [1, "vocab"]),
        helper.make_tensor_value_info("shape", longs, [2]),
        helper.make_tensor_value_info("count", longs, [1]),
    ]
    outputs = [
        helper.make_tensor_value_info("values", floats, ["sentences", "count"]),
        helper.make_tensor_value_info("indices", longs, ["sentences", "count"]),
    ]
    graph = helper.make_graph(nodes, "aayn_candidates", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


class OnnxSessions:
    """An exported folder's three graphs in ONNX Runtime sessions, and the model's special ids."""

    def __init__(self, folder: Path, threads: int | None = None):
        onnxruntime = import_onnxruntime()
        for name in FILES:
            if not (folder / name).is_file():
                raise FileNotFoundError(f"--model {folder}: no {name} (`aayn export --format onnx` writes it)")
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.layers = self.config["decoder_layers"]
        try:
            self.encoder, self.first = (
                onnxruntime.InferenceSession(str(folder / name), options, providers=["CPUExecutionProvider"])
                for name in FILES[:2]
            )
            later = reordering(folder / FILES[2], self.layers)
            self.later = onnxruntime.InferenceSession(later, options, providers=["CPUExecutionProvider"])
        except Exception as error:  # noqa: BLE001  onnxruntime raises its own classes for a damaged graph
            raise ValueError(f"--model {folder}: ONNX Runtime cannot load it ({error})") from None
        alone = onnxruntime.SessionOptions()
        alone.intra_op_num_threads = 1  # on the caller's thread: a second pool would spin against the model's
        self.chooser = onnxruntime.InferenceSession(candidates_graph(), alone, providers=["CPUExecutionProvider"])
        vocab, eos, pad = self.config["decoder_vocab_size"], self.config["eos_token_id"], self.config["pad_token_id"]
        self.only_eos = np.where(np.arange(vocab) == eos, 0.0, -np.inf).astype(np.float32)[None]
        self.ban = np.where((np.arange(vocab) == pad) & (pad != eos), -np.inf, 0.0).astype(np.float32)[None]
        self.ban_eos = np.where(np.arange(vocab) == eos, -np.inf, self.ban).astype(np.float32)  # before min tokens

    def candidates(self, logits: np.ndarray, scores: np.ndarray, at_limit: np.ndarray, count: int, early=False):
        """The `count` best candidates of each sentence (`scores`: (n, k) its beams' log P; `at_limit`: (n,) the
        sentences at their limit; `early`: eos is banned too, before the folder's least new tokens): their values,
        beams and words, each (n, count)."""
        n, k = scores.shape
        feed = {
            "logits": logits, "scores": scores.reshape(-1, 1), "at_limit": np.repeat(at_limit, k)[:, None],
            "only_eos": self.only_eos, "ban": self.ban_eos if early else self.ban, "shape": np.array([n, -1]),
            "count": np.array([count]),
        }  # fmt: skip
        values, indices = self.chooser.run(None, feed)
        return values, *np.divmod(indices, logits.shape[-1])

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})[0]

    def first_step(self, decoder_input_ids: np.ndarray, mask: np.ndarray, hidden: np.ndarray):
        """(logits (B, T, vocab), the self-attention keys and values per layer, the cross-attention's per layer)."""
        feed = {"input_ids": decoder_input_ids, "encoder_attention_mask": mask, "encoder_hidden_states": hidden}
        outputs = self.first.run(None, feed)
        past = [outputs[1 + 4 * i : 3 + 4 * i] for i in range(self.layers)]
        cross = [outputs[3 + 4 * i : 5 + 4 * i] for i in range(self.layers)]
        return outputs[0], past, cross

    def next_step(self, words: np.ndarray, mask: np.ndarray, past: list, cross: list, rows: np.ndarray):
        """(the next token's logits (B, vocab), the grown self-attention keys and values per layer); `rows`: the
        rows of `past` (the previous step's) each row continues."""
        feed = {"input_ids": words[:, None], "encoder_attention_mask": mask, "beam_rows": rows}
        for i in range(self.layers):  # the past as the previous step gave it: the graph reorders it (`reordering`)
            feed[f"past_key_values.{i}.decoder.key.previous"] = past[i][0]
            feed[f"past_key_values.{i}.decoder.value.previous"] = past[i][1]
            feed[f"past_key_values.{i}.encoder.key"], feed[f"past_key_values.{i}.encoder.value"] = cross[i]
        outputs = self.later.run(None, feed)
        return np.ascontiguousarray(outputs[0][:, -1]), [outputs[1 + 2 * i : 3 + 2 * i] for i in range(self.layers)]


class Beams:
    """The books of the sentences still searched (m of them, k rows each), as `search_aayn.SearchState` keeps
    them: live scores, histories, the best k finished hypotheses, and where each row's cache lies."""

    def __init__(self, limits: np.ndarray, k: int, start: int, pad: int):
        n, longest = limits.shape[0], int(limits.max())
        self.k, self.sentence, self.limits = k, np.arange(n), limits
        self.scores = np.full((n, k), -np.inf, dtype=np.float32)
        self.scores[:, 0] = 0.0  # one live beam at the start
        self.history = np.full((n * k, longest + 1), pad, dtype=np.int64)
        self.history[:, 0] = start
        self.finished = np.full((n, k), -np.inf, dtype=np.float32)
        self.finished_tokens = np.full((n, k, longest + 1), pad, dtype=np.int64)
        self.results: list[list[tuple[float, np.ndarray]]] = [[] for _ in range(n)]

    def store(self, done: np.ndarray, returned: int) -> None:
        for i in np.flatnonzero(done):
            self.results[self.sentence[i]] = [
                (float(self.finished[i, r]), self.finished_tokens[i, r]) for r in range(returned)
            ]

    def keep(self, kept: np.ndarray) -> None:
        rows = (kept[:, None] * self.k + np.arange(self.k)).reshape(-1)
        self.sentence, self.limits, self.scores = self.sentence[kept], self.limits[kept], self.scores[kept]
        self.history, self.finished = self.history[rows], self.finished[kept]
        self.finished_tokens = self.finished_tokens[kept]


class OnnxTranslator(Translator):
    """An ONNX folder (`aayn export --format onnx`: graphs, config, generation config, tokenizer) as a
    `Translator`: §6.1's search with the paper's rules and the folder's beam size and alpha unless given, n-best
    lists with their scores, and scoring given pairs (one teacher-forced decoder call), equal to the torch model's
    outputs. `threads`: ONNX Runtime's intra-op threads (default: all cores)."""

    kind, abilities = OnnxFolder.name, OnnxFolder.abilities
    normalization = "gnmt"  # the folder's length normalization (`DecodingSettings.normalization`)

    def __init__(self, folder: str | Path, device: str = "cpu", threads: int | None = None):
        from transformers import AutoTokenizer

        if device != "cpu":
            raise ValueError(f"--device {device}: aayn runs ONNX folders on cpu (ONNX Runtime's CPU provider)")
        self.folder = Path(folder).expanduser()
        self.name = str(folder)
        self.sessions = OnnxSessions(self.folder, threads)
        config = self.sessions.config
        self.start, self.eos = config["decoder_start_token_id"], config["eos_token_id"]
        self.pad = config["pad_token_id"]
        path = self.folder / "generation_config.json"
        self.generation = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        self.generation.update(folder_rules(config))  # the rules the model's config states
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.source_limit = source_limit(self.tokenizer.model_max_length, config["max_position_embeddings"])

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, verbose=False)["input_ids"]

    def encode_targets(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(text_target=texts, verbose=False)["input_ids"]

    def padded(self, rows: list[list[int]], pad: int) -> tuple[np.ndarray, np.ndarray]:
        width = max(map(len, rows))
        ids = np.array([row + [pad] * (width - len(row)) for row in rows], dtype=np.int64)
        mask = np.array([[1] * len(row) + [0] * (width - len(row)) for row in rows], dtype=np.int64)
        return ids, mask

    def hypotheses(self, sources: list[list[int]], settings: DecodingSettings) -> list[list[tuple]]:
        """Per source (token ids, eos-terminated), its `settings.nbest` best hypotheses as (log P / lp, ids: the
        start token, the tokens, eos, padding): what `decode_batch` turns into text (and the bench compares)."""
        input_ids, mask = self.padded(sources, self.pad)
        return self.search(input_ids, mask, settings)

    def best_ids(self, sources: list[list[int]], settings: DecodingSettings) -> list[list[int]]:
        best = [hypotheses[0][1][1:].tolist() for hypotheses in self.hypotheses(sources, settings)]
        return [[i for i in (row[: row.index(self.eos)] if self.eos in row else row) if i != self.pad] for row in best]

    def decode_batch(
        self, sources: list[list[int]], settings: DecodingSettings, prefixes: list[str] | None
    ) -> list[list[tuple[float, str]]]:
        found = self.hypotheses(sources, settings)
        texts = self.tokenizer.batch_decode([tokens for hypotheses in found for _, tokens in hypotheses],
                                            skip_special_tokens=True)  # fmt: skip
        scores = [score for hypotheses in found for score, _ in hypotheses]
        n = settings.nbest
        return [[(scores[r], texts[r].strip()) for r in range(i * n, (i + 1) * n)] for i in range(len(sources))]

    def score_batch(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        input_ids, mask = self.padded(sources, self.pad)
        hidden = self.sessions.encode(input_ids, mask)
        labels, _ = self.padded(targets, self.pad)
        decoder_input_ids = np.concatenate([np.full((len(targets), 1), self.start), labels[:, :-1]], 1)
        logits, _, _ = self.sessions.first_step(decoder_input_ids, mask, hidden)
        chosen = np.take_along_axis(log_softmax(logits), labels[:, :, None], 2)[:, :, 0].astype(np.float64)
        return [chosen[row, : len(ids)].tolist() for row, ids in enumerate(targets)]

    def search(self, input_ids: np.ndarray, mask: np.ndarray, settings: DecodingSettings):
        """Per sentence, its `settings.nbest` best hypotheses as (log P / lp, ids: the start token, the tokens,
        eos, padding)."""
        k, alpha, returned, sessions = settings.num_beams, settings.length_penalty, settings.nbest, self.sessions
        self.normalization = settings.normalization  # lp(Y), read by the steps
        self.early_stopping = settings.early_stopping  # when a sentence is done, read by the beam steps
        self.min_step = settings.min_new_tokens + 1  # the first step at which eos may end a hypothesis
        limits = settings.limits(mask.sum(1))
        hidden = sessions.encode(input_ids, mask)
        n = input_ids.shape[0]
        logits, past, cross = sessions.first_step(np.full((n, 1), self.start, dtype=np.int64), mask, hidden)
        logits = np.repeat(logits[:, -1], k, 0)  # every beam starts from the start token: one decoder row each
        beams, layout = Beams(limits, k, self.start, self.pad), 1  # cache rows per sentence: 1 until the first step
        for step in range(1, int(limits.max()) + 1):
            at_limit = step >= beams.limits
            early = step <= settings.min_new_tokens  # eos may not end a hypothesis yet (fairseq's --min-len)
            candidates = sessions.candidates(logits, beams.scores, at_limit, 1 if k == 1 else 2 * k, early)
            if k == 1:
                done, parents = self.greedy_step(beams, *candidates, step, alpha)
            else:
                done, parents = self.beam_step(beams, *candidates, step, alpha, returned)
            beams.store(done, returned)
            kept = np.flatnonzero(~done)
            if kept.size == 0:
                break
            m = len(beams.limits)
            rows = (kept[:, None] * layout + np.minimum(parents[kept], layout - 1)).reshape(-1)
            words = beams.history.reshape(m, k, -1)[kept, :, step].reshape(-1)
            if layout != k or kept.size != m:  # the encoder's keys and values of the sentences left, k rows each
                same = np.repeat(kept * layout, k)
                cross, mask = [(key[same], value[same]) for key, value in cross], mask[same]
            beams.keep(kept)
            layout = k
            logits, past = sessions.next_step(words, mask, past, cross, rows)
        return beams.results

    def search_done(self, beams: Beams, best_live: np.ndarray, step: int, alpha: float, returned: int):
        """(m,) whether each sentence may stop: the torch search's rule itself (`policy_aayn.search_done`)."""
        norm, early, largest_lp = self.normalization, self.early_stopping, None
        if early not in (True, False):  # the exact rule: float32 throughout, as the torch search divides
            largest_lp = largest_length_penalty(beams.limits, step, alpha, norm, self.min_step).astype(np.float32)
        return search_done(beams.finished, best_live, step, alpha, norm, early, returned, largest_lp)

    def greedy_step(self, beams: Beams, values, parents, words, step: int, alpha: float):
        """The likeliest token (`values`: the score with it); eos ends the hypothesis. Returns which sentences are
        done, and each row's parent (its own)."""
        beams.scores, words = values, words[:, 0]
        beams.history[:, step] = words
        done = words == self.eos
        beams.finished[done] = beams.scores[done] / length_penalty(step, alpha, self.normalization)
        beams.finished_tokens[done, 0] = beams.history[done]
        return done, parents

    def beam_step(self, beams: Beams, values, parents, words, step: int, alpha: float, returned: int):
        """One step of §6.1's beam search after its candidates are chosen (`SearchState.finish`, `live_on`,
        `_search_done`). Returns which sentences are done and each new beam's parent beam, (m, k)."""
        m, k = beams.scores.shape
        # finish: the candidates among the first k that end in eos join the best k finished hypotheses
        ending = (words[:, :k] == self.eos) & np.isfinite(values[:, :k])
        if ending.any():
            rows = (np.arange(m)[:, None] * k + parents[:, :k]).reshape(-1)
            ended_tokens = beams.history[rows].reshape(m, k, -1)
            ended_tokens[:, :, step] = self.eos
            ended = np.where(ending, values[:, :k] / length_penalty(step, alpha, self.normalization), -np.inf)
            merged = np.concatenate([beams.finished, ended], 1)
            pick = np.argsort(-merged, axis=1, kind="stable")[:, :k]
            beams.finished = np.take_along_axis(merged, pick, 1).astype(np.float32)
            tokens = np.concatenate([beams.finished_tokens, ended_tokens], 1)
            beams.finished_tokens = np.take_along_axis(tokens, pick[:, :, None], 1)
        # live on: the first k candidates that do not end in eos
        going = words != self.eos
        going &= np.cumsum(going, 1) <= k
        picks = np.argsort(~going, axis=1, kind="stable")[:, :k]
        taken = np.take_along_axis(going, picks, 1)
        scores = np.where(taken, np.take_along_axis(values, picks, 1), -np.inf).astype(np.float32)
        chosen = np.where(taken, np.take_along_axis(parents, picks, 1), 0)
        next_words = np.where(taken, np.take_along_axis(words, picks, 1), self.pad)
        # done: at the limit, or by the folder's stopping rule (`search_aayn._search_done`)
        done = (step >= beams.limits) | self.search_done(beams, scores.max(1), step, alpha, returned)
        beams.scores = scores
        rows = (np.arange(m)[:, None] * k + chosen).reshape(-1)
        beams.history = beams.history[rows]
        beams.history[:, step] = next_words.reshape(-1)
        return done, chosen
