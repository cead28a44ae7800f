"""Word alignments from cross-attention, as fairseq's `--print-alignment` gives them: the attention of one decoder
layer (`layer`, default the last) averaged over its first `heads` heads (default all), read for each target token
at the step that produced it, and its argmax over the source tokens. Special tokens (eos, pad) are left out on both
sides, and positions count the other tokens from 0: a link `i-j` says target token j came from source token i.

A translation's alignment is the attention the search computed at the step that chose each token, kept as it
searched (`generate(..., output_alignments=True)`, search_aayn.py); a given pair's (`aayn score`) is that of one
teacher-forced forward over its target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.policy_aayn import alignment_in_force


@dataclass(frozen=True)
class AlignmentSettings:
    """Which attention aligns: the decoder layer (from 0; None: the last) and how many of its first heads are
    averaged (None: all), fairseq's `alignment_layer` and `alignment_heads`."""

    layer: int | None = None
    heads: int | None = None

    def check(self, config) -> tuple[int, int]:
        """(layer, heads) for a model `config`, or ValueError naming the bad value."""
        return alignment_in_force(config.decoder_layers, config.decoder_attention_heads, self.layer, self.heads)


@dataclass
class Alignment:
    """One pair's links (source position, target position, attention weight), and the tokens they count."""

    links: list[tuple[int, int, float]] = field(default_factory=list)
    source_tokens: list[str] = field(default_factory=list)
    target_tokens: list[str] = field(default_factory=list)

    def pairs(self) -> str:
        """fairseq's form: `i-j` per target token, in target order."""
        return " ".join(f"{source}-{target}" for source, target, _ in self.links)

    def as_dict(self) -> dict:
        return {
            "alignment": [[source, target, round(weight, 6)] for source, target, weight in self.links],
            "source_tokens": self.source_tokens,
            "target_tokens": self.target_tokens,
        }


def hard_links(attention, source_ids: list[int], target_ids: list[int], special: set[int]) -> list:
    """attention (target rows, source columns: nested lists) for `target_ids` (the tokens produced) and
    `source_ids` -> the links of the target tokens that are not special to their most attended source token that
    is not (the first of equal weights)."""
    source_keep = [i for i, token in enumerate(source_ids) if token not in special]
    target_keep = [j for j, token in enumerate(target_ids) if token not in special]
    links = []
    for position, j in enumerate(target_keep):
        row = attention[j]
        weights = [row[i] for i in source_keep]
        if weights:
            best = max(range(len(weights)), key=weights.__getitem__)
            links.append((best, position, float(weights[best])))
    return links


def align_ids(model, tokenizer, sources: list[list[int]], targets: list[list[int]], settings: AlignmentSettings):
    """The alignment of each (source ids, target ids) pair, target ids as produced (eos last, no start token): one
    teacher-forced forward of the batch."""
    import torch

    from ..data.token_batches import padded

    config = model.config
    inputs = padded(tokenizer, sources).to(model.device)
    width = max(1, max(map(len, targets)))
    decoder = torch.full((len(targets), width), config.pad_token_id, dtype=torch.long)
    for row, ids in enumerate(targets):
        decoder[row, : len(ids)] = torch.tensor([config.decoder_start_token_id, *ids[:-1]], dtype=torch.long)[:width]
    layer, heads = settings.check(config)
    with torch.inference_mode():
        out = model(**inputs, decoder_input_ids=decoder.to(model.device), output_attentions=True, use_cache=False)
    attention = out.cross_attentions[layer][:, :heads].double().mean(dim=1)  # (batch, target, source)
    return attention_alignments(attention, inputs["attention_mask"], sources, targets, tokenizer, config)


def attention_alignments(attention, source_mask, sources: list[list[int]], targets: list[list[int]], tokenizer, config):
    """Each pair's `Alignment` from `attention` (rows, target tokens, padded source: a tensor) read on the source
    tokens where `source_mask` (rows, padded source) is set; `targets` as produced (eos last, no start token)."""
    special = {config.eos_token_id, config.pad_token_id}
    source_pieces = {index: piece for piece, index in tokenizer.get_vocab().items()}  # the source side's
    aligned = []
    for row, (source, target) in enumerate(zip(sources, targets)):
        columns = source_mask[row].nonzero()[:, 0].to(attention.device)
        rows = attention[row, : len(target)].index_select(-1, columns).tolist()
        links = hard_links(rows, source, target, special)
        kept_source, kept_target = ([t for t in ids if t not in special] for ids in (source, target))
        pieces = [source_pieces.get(t, str(t)) for t in kept_source]
        aligned.append(Alignment(links, pieces, tokenizer.convert_ids_to_tokens(kept_target)))
    return aligned


def pieces_alignment(attention, source_pieces: list[str], target_pieces: list[str], special: set[str]) -> Alignment:
    """An `Alignment` from attention over pieces (an engine that names tokens by their strings: CTranslate2)."""
    links = hard_links(attention, source_pieces, target_pieces, special)
    keep = [[piece for piece in pieces if piece not in special] for pieces in (source_pieces, target_pieces)]
    return Alignment(links, *keep)


WORD_MARKS = ("▁", "Ġ")  # a piece that starts a word: SentencePiece's and byte-level BPE's space marks


def word_links(alignment: Alignment) -> set[tuple[int, int]]:
    """The alignment's links between words (from 0), for text whose words are separated by spaces: a piece starts a
    word where it carries a space mark (or is the first); a Moses + BPE piece ending in `@@` runs into the next."""

    def words(pieces: list[str]) -> list[int]:
        index, out, joined = -1, [], True
        for piece in pieces:
            if index < 0 or piece.startswith(WORD_MARKS) or not joined:
                index += 1
            out.append(index)
            joined = piece.endswith("@@") or not any(piece.endswith("@@") for piece in pieces)
        return out

    source, target = words(alignment.source_tokens), words(alignment.target_tokens)
    return {(source[i], target[j]) for i, j, _ in alignment.links}


def read_gold(lines) -> tuple[list[set], list[set]]:
    """Gold alignments, one line a pair: `i-j` sure links, `ipj` possible ones (1-indexed, as given) -> (sure,
    possible) link sets per pair, the sure ones counted among the possible."""
    sure, possible = [], []
    for line in lines:
        these, maybe = set(), set()
        for link in line.split():
            kind = "p" if "p" in link else "-"
            i, j = (int(part) for part in link.split(kind))
            (maybe if kind == "p" else these).add((i, j))
        sure.append(these)
        possible.append(these | maybe)
    return sure, possible


def alignment_error_rate(predicted: list[set], sure: list[set], possible: list[set]) -> float:
    """Och and Ney's AER over a corpus: 1 - (|A & S| + |A & P|) / (|A| + |S|), links in the gold's indexing."""
    hits = sum(len(a & s) + len(a & p) for a, s, p in zip(predicted, sure, possible))
    total = sum(len(a) + len(s) for a, s in zip(predicted, sure))
    return 1.0 - hits / total if total else 0.0
