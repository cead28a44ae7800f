"""Subword regularization: BPE-dropout (Provilkov et al. 2020) for the byte-level BPE and sampling (Kudo 2018) for a
SentencePiece unigram model, a new segmentation of every training sentence each epoch, drawn from the prepared ids.

The data is prepared once, with the tokenizer's own segmentation; training reads it through `Resegmented`, which
turns each example's ids back into its words (the byte-level BPE loses nothing: its tokens are the sentence's
bytes) and merges each word again, every merge that applies left out with probability `p` at every step (the
paper's algorithm: with p=0 it is the tokenizer's own segmentation, which the construction checks). Each draw
comes from `(seed, epoch, example, side)` alone, so every process, a resumed run and a rerun draw the same, and
the tokenizer's library draws nothing (`tokenizers`' own `dropout` takes no seed; `sentencepiece`'s sampling draws
from one generator per thread, seeded once). A unigram model's sentence is its pieces joined, and its segmentation is
drawn among the ways the model's pieces spell it (`UnigramSampling`). Validation, test and decoding read the
prepared ids as they are.

The token budget of a `max_tokens` batch is counted on the prepared lengths: a dropped-out sentence is longer
(a fifth at p=0.1 on the Bible's English and French), and so is the padded batch.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import json
import math
import random
import re
from functools import lru_cache

from torch.utils.data import Dataset as TorchDataset

CHECKED_EXAMPLES = 64  # examples whose p=0 segmentation must equal the prepared ids


@lru_cache(maxsize=1)
def _byte_values() -> dict[str, int]:
    """The byte-level alphabet's characters to the bytes they stand for (GPT-2's table)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


def redrawn_runs(ids, fixed: set[int], redraw) -> list[int]:
    """`ids` with each run of tokens between `fixed` ones (`</s>`, a language token) replaced by `redraw(run)`,
    the fixed tokens where they were."""
    out, run = [], []
    for index in [*ids, None]:
        if index is not None and index not in fixed:
            run.append(index)
            continue
        if run:
            out += redraw(run)
            run = []
        if index is not None:
            out.append(index)
    return out


class BpeDropout:
    """Draws segmentations of a byte-level BPE tokenizer's ids: `resample(ids, rng)` gives the same sentence's ids
    with every merge left out with probability `p`; special tokens (`</s>`, a target token) stay where they are."""

    def __init__(self, tokenizer, p: float):
        if not 0 <= p < 1:
            raise ValueError(f"bpe_dropout must be in [0, 1) (the chance a merge is left out), got {p}")
        backend = getattr(tokenizer, "backend_tokenizer", None)
        state = json.loads(backend.to_str()) if backend is not None else {}
        model, pre = state.get("model") or {}, state.get("pre_tokenizer") or {}
        if model.get("type") != "BPE" or pre.get("type") != "ByteLevel":
            raise ValueError(
                "bpe_dropout redraws a byte-level BPE's segmentation (aayn's default tokenizer); this tokenizer is "
                f"{model.get('type') or type(tokenizer).__name__} with a {pre.get('type')} pre-tokenizer"
            )
        self.p, self.pre_tokenizer, self.vocab = p, backend.pre_tokenizer, model["vocab"]
        self.tokens = {index: token for token, index in self.vocab.items()}
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.special = {added["id"] for added in state.get("added_tokens", []) if added.get("special")}
        self.bytes = _byte_values()

    def exact(self) -> BpeDropout:
        """The tokenizer's own segmentation: no merge left out."""
        exact = copy.copy(self)
        exact.p = 0.0
        return exact

    def merge(self, word: str, rng: random.Random) -> list[str]:
        """One word (byte-level characters) merged as BPE does, the lowest-ranked pair first (the leftmost of
        equals), each applicable merge left out of a step with probability p; none left: the word is done."""
        symbols, p, ranks, draw = list(word), self.p, self.ranks, rng.random
        never = len(ranks)  # the rank of a pair no merge joins
        pairs = [ranks.get(pair, never) for pair in itertools.pairwise(symbols)]  # pairs[i]: symbols i and i+1
        while pairs:
            best, best_rank = -1, never
            for i, rank in enumerate(pairs):
                # only a pair that would be chosen needs its draw: the kept pair of lowest rank is the same
                if rank < best_rank and (p == 0 or draw() >= p):
                    best, best_rank = i, rank
            if best < 0:
                break
            symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
            del pairs[best]
            if best > 0:
                pairs[best - 1] = ranks.get((symbols[best - 1], symbols[best]), never)
            if best < len(pairs):
                pairs[best] = ranks.get((symbols[best], symbols[best + 1]), never)
        return symbols

    def _words(self, run: list[int]) -> list[str] | None:
        """A run of ordinary tokens as the pre-tokenizer's words; None where its bytes are not whole characters
        (a truncated sentence's last one)."""
        raw = bytes(self.bytes[char] for index in run for char in self.tokens[index])
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return [word for word, _ in self.pre_tokenizer.pre_tokenize_str(text)]

    def resample(self, ids, rng: random.Random) -> list[int]:
        def redraw(run: list[int]) -> list[int]:
            words = self._words(run)
            return run if words is None else [self.vocab[piece] for word in words for piece in self.merge(word, rng)]

        return redrawn_runs(ids, self.special, redraw)


def _log_sum(values) -> float:
    values = list(values)
    top = max(values)
    return top + math.log(sum(math.exp(value - top) for value in values))


class UnigramSampling:
    """Draws segmentations of a SentencePiece unigram model's ids as `sentencepiece`'s `sample_encode` does (Kudo
    2018): a segmentation x of a sentence with probability proportional to P(x)^alpha, P(x) the product of its pieces'
    probabilities, among every segmentation (`nbest` -1: forward-filtering, backward-sampling over the lattice) or
    among the sentence's `nbest` best. A sentence is drawn word by word (a word: a piece starting with ▁ and those
    after it; no piece of the model holds ▁ past its start, so a segmentation of the sentence is one of each word),
    its n best combined from its words' n best. `</s>` and the user-defined pieces (a multilingual model's `>>fr<<`)
    stay where they are, the text between them drawn; a stretch holding an unknown piece keeps its prepared ids."""

    def __init__(self, tokenizer, alpha: float, nbest: int):
        from .tokenizer import sentencepiece_model_of

        if not alpha > 0 or not (nbest == -1 or nbest > 1):
            raise ValueError(f"SentencePiece sampling takes alpha > 0 and nbest -1 (every segmentation) or > 1, got "
                             f"alpha {alpha}, nbest {nbest}")  # fmt: skip
        model = sentencepiece_model_of(tokenizer)
        if model is None:
            raise ValueError("sentencepiece_alpha samples a SentencePiece unigram model's segmentations; this "
                             f"tokenizer ({type(tokenizer).__name__}) has none")  # fmt: skip
        from sentencepiece import sentencepiece_model_pb2

        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(model)
        if proto.trainer_spec.model_type != proto.trainer_spec.UNIGRAM:
            raise ValueError("sentencepiece_alpha samples a unigram model's segmentations; this SentencePiece model is "
                             "BPE (sentencepiece_model_type: unigram)")  # fmt: skip
        normal = proto.SentencePiece.NORMAL
        self.alpha, self.nbest = alpha, nbest
        self.pieces = [piece.piece for piece in proto.pieces]
        self.scores = {piece.piece: (i, piece.score) for i, piece in enumerate(proto.pieces) if piece.type == normal}
        if tokenizer.convert_ids_to_tokens(list(range(len(self.pieces)))) != self.pieces:
            raise ValueError("the tokenizer's ids are not its SentencePiece model's pieces")
        if any("▁" in piece[1:] for piece in self.scores):
            raise ValueError("SentencePiece sampling draws word by word; this model has pieces across words")
        self.longest = max(map(len, self.scores))
        self.normal_ids = {i for i, _ in self.scores.values()}
        fixed = (proto.SentencePiece.USER_DEFINED, proto.SentencePiece.CONTROL)
        self.fixed = {tokenizer.eos_token_id} | {i for i, piece in enumerate(proto.pieces) if piece.type in fixed}

    def exact(self) -> UnigramSampling:
        """The tokenizer's own segmentation: the best one (Viterbi's)."""
        exact = copy.copy(self)
        exact.nbest = 1
        return exact

    def edges(self, word: str) -> list[list[tuple[int, int, float]]]:
        """edges[end]: (start, id, score) of each piece that spells word[start:end]."""
        scores, found = self.scores, [[] for _ in range(len(word) + 1)]
        for end in range(1, len(word) + 1):
            for start in range(max(0, end - self.longest), end):
                piece = scores.get(word[start:end])
                if piece is not None:
                    found[end].append((start, *piece))
        return found

    def sampled(self, word: str, rng: random.Random) -> list[int]:
        """A segmentation of `word` drawn among all, with probability proportional to exp(alpha * its score)."""
        edges, alpha = self.edges(word), self.alpha
        forward = [0.0] + [-math.inf] * len(word)
        for end in range(1, len(word) + 1):
            if edges[end]:
                forward[end] = _log_sum(forward[start] + alpha * score for start, _, score in edges[end])
        ids, end = [], len(word)
        while end > 0:
            weights = [math.exp(forward[start] + alpha * score - forward[end]) for start, _, score in edges[end]]
            start, index, _ = edges[end][rng.choices(range(len(weights)), weights)[0]]
            ids.append(index)
            end = start
        return ids[::-1]

    def best(self, word: str, n: int) -> list[tuple[float, list[int]]]:
        """The `n` best segmentations of `word`, (score, ids), best first."""
        edges = self.edges(word)
        best: list[list[tuple[float, int, int, int]]] = [[(0.0, -1, -1, -1)]] + [[] for _ in word]
        for end in range(1, len(word) + 1):
            candidates = ((entry[0] + score, start, rank, index) for start, index, score in edges[end]
                          for rank, entry in enumerate(best[start]))  # fmt: skip
            best[end] = heapq.nlargest(n, candidates, key=lambda entry: entry[0])
        return [(entry[0], self._path(best, len(word), rank)) for rank, entry in enumerate(best[len(word)])]

    @staticmethod
    def _path(best, end: int, rank: int) -> list[int]:
        ids = []
        while end > 0:
            _, start, previous, index = best[end][rank]
            ids.append(index)
            end, rank = start, previous
        return ids[::-1]

    def sentence_best(self, words: list[str], n: int) -> list[tuple[float, list[int]]]:
        """The `n` best segmentations of the sentence `words` spell: each word's n best, combined best first."""
        combined = [(0.0, [])]
        for word in words:
            options = self.best(word, n)
            combined = heapq.nlargest(n, ((score + more, ids + extra) for score, ids in combined
                                          for more, extra in options), key=lambda entry: entry[0])  # fmt: skip
        return combined

    def segment(self, words: list[str], rng: random.Random) -> list[int]:
        if self.nbest == -1:
            return [index for word in words for index in self.sampled(word, rng)]
        options = self.sentence_best(words, self.nbest)
        if self.nbest == 1:
            return options[0][1]
        top = options[0][0]
        weights = [math.exp(self.alpha * (score - top)) for score, _ in options]
        return options[rng.choices(range(len(options)), weights)[0]][1]

    def resample(self, ids, rng: random.Random) -> list[int]:
        def redraw(run: list[int]) -> list[int]:
            if any(index not in self.normal_ids for index in run):
                return run
            text = "".join(self.pieces[index] for index in run)
            return self.segment([word for word in re.split("(?=▁)", text) if word], rng)

        return redrawn_runs(ids, self.fixed, redraw)


class Resegmented(TorchDataset):
    """A prepared training split whose `input_ids` and `labels` are drawn anew by `segmenter` each epoch
    (`set_epoch`, which the Trainer's loader calls through `batching.SharedEpoch`); the draw of example i in epoch e
    comes from `(seed, e, i, side)` alone. Examples longer than their side's limit after the draw keep the prepared
    ids."""

    def __init__(self, prepared, segmenter: BpeDropout | UnigramSampling, *, seed: int, limits: tuple[int, int]):
        self.prepared, self.segmenter, self.seed, self.limits, self.epoch = prepared, segmenter, seed, limits, 0
        exact = segmenter.exact()
        for row in prepared.select(range(min(CHECKED_EXAMPLES, len(prepared)))):
            for key in ("input_ids", "labels"):
                if exact.resample(row[key], random.Random(0)) != list(row[key]):
                    raise ValueError(
                        "subword regularization: the prepared ids are not this tokenizer's segmentation (a different "
                        f"tokenizer prepared them?): {list(row[key])[:12]}"
                    )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.prepared)

    def draw(self, index: int, epoch: int) -> dict:
        row = dict(self.prepared[index])
        for side, key in enumerate(("input_ids", "labels")):
            rng = random.Random(f"{self.seed}:{epoch}:{index}:{side}")
            ids = self.segmenter.resample(row[key], rng)
            row[key] = ids if len(ids) <= self.limits[side] else list(row[key])
        row["attention_mask"] = [1] * len(row["input_ids"])
        return row

    def __getitem__(self, index: int) -> dict:
        return self.draw(index, self.epoch)
