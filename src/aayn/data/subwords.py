"""Subword regularization: BPE-dropout (Provilkov et al. 2020), a new segmentation of every training sentence each
epoch, drawn from the prepared token ids.

The data is prepared once, with the tokenizer's own segmentation; training reads it through `Resegmented`, which
turns each example's ids back into its words (the byte-level BPE loses nothing: its tokens are the sentence's
bytes) and merges each word again, every merge that applies left out with probability `p` at every step (the
paper's algorithm: with p=0 it is the tokenizer's own segmentation, which the construction checks). Each draw
comes from `(seed, epoch, example, side)` alone, so every process, a resumed run and a rerun draw the same, and
the tokenizer's library draws nothing (`tokenizers`' own `dropout` takes no seed). Validation, test and decoding
read the prepared ids as they are.

The token budget of a `max_tokens` batch is counted on the prepared lengths: a dropped-out sentence is longer
(a fifth at p=0.1 on the Bible's English and French), and so is the padded batch.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
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
        out, run = [], []
        for index in [*ids, None]:
            if index is not None and index not in self.special:
                run.append(index)
                continue
            if run:
                words = self._words(run)
                if words is None:
                    out += run
                else:
                    out += [self.vocab[piece] for word in words for piece in self.merge(word, rng)]
                run = []
            if index is not None:
                out.append(index)
        return out


class Resegmented(TorchDataset):
    """A prepared training split whose `input_ids` and `labels` are drawn anew by `segmenter` each epoch
    (`set_epoch`, which the Trainer calls through Accelerate's loader); the draw of example i in epoch e comes from
    `(seed, e, i, side)` alone. Examples longer than their side's limit after the draw keep the prepared ids."""

    def __init__(self, prepared, segmenter: BpeDropout, *, seed: int, limits: tuple[int, int]):
        self.prepared, self.segmenter, self.seed, self.limits, self.epoch = prepared, segmenter, seed, limits, 0
        exact = copy.copy(segmenter)
        exact.p = 0.0
        for row in prepared.select(range(min(CHECKED_EXAMPLES, len(prepared)))):
            for key in ("input_ids", "labels"):
                if exact.resample(row[key], random.Random(0)) != list(row[key]):
                    raise ValueError(
                        "bpe_dropout: the prepared ids are not this tokenizer's segmentation (a different "
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
