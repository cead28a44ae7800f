"""Scoring given translations (fairseq's `--score-reference`, CTranslate2's `score_batch`, marian-scorer): per pair,
log P(target | source) including eos, the GNMT-normalized score the paper's search ranks by, and on request the
log-probability of every target token. Batched by padded tokens, like translation."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .data.token_batches import decoding_batches, padded
from .policy_aayn import gnmt_length_penalty, length_penalty_in_force
from .translator import DECODING_BATCH_TOKENS


@dataclass
class Score:
    """One pair's score: `log_prob` = log P(target | source), eos included; `score` = log_prob / lp(|Y|) with
    GNMT's lp(|Y|) = ((5 + |Y|) / 6)^alpha, |Y| counting eos (what `sequences_scores` holds for the search's own
    outputs); `tokens`: the log-probability of each target token, eos last (empty unless asked for)."""

    log_prob: float
    score: float
    tokens: list[float] = field(default_factory=list)


def length_penalty_of(model: PreTrainedModel, alpha: float | None) -> float:
    """alpha as given, else the model's generation config's (the search's default), else transformers' default."""
    return float(length_penalty_in_force(alpha, getattr(model.generation_config, "length_penalty", None)))


@torch.inference_mode()
def score_ids(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a padded batch (labels -100 where there is no token): per row log P (float64), the normalized score, and
    the (rows, target length) token log-probabilities (0 at padding). One forward pass, teacher-forced."""
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    present = labels != -100
    exact = torch.promote_types(logits.dtype, torch.float32)  # float32, or float64 for a float64 model
    log_probs = F.log_softmax(logits.to(exact), dim=-1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    per_token = log_probs.double().masked_fill(~present, 0.0)
    total = per_token.sum(-1)
    return total, total / gnmt_length_penalty(present.sum(-1).double(), alpha), per_token


def score_texts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: list[str],
    targets: list[str],
    *,
    length_penalty: float | None = None,
    per_token: bool = False,
    batch_tokens: int = DECODING_BATCH_TOKENS,
) -> list[Score]:
    """Scores of the pairs (sources[i], targets[i]) in input order; `length_penalty` is alpha (default: the model's
    generation config's). Texts are tokenized as in training (the target side with `text_target`, eos appended)."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets: scoring needs one target per source")
    alpha = length_penalty_of(model, length_penalty)
    source_ids = tokenizer(list(sources), verbose=False)["input_ids"]
    target_ids = tokenizer(text_target=list(targets), verbose=False)["input_ids"]
    lengths = [max(len(s), len(t)) for s, t in zip(source_ids, target_ids)]
    scores: list[Score | None] = [None] * len(sources)
    model.eval()
    for batch in decoding_batches(lengths, batch_tokens):
        inputs = padded(tokenizer, [source_ids[i] for i in batch]).to(model.device)
        width = max(len(target_ids[i]) for i in batch)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        for row, i in enumerate(batch):
            labels[row, : len(target_ids[i])] = torch.tensor(target_ids[i])
        total, normalized, tokens = score_ids(
            model, inputs["input_ids"], inputs["attention_mask"], labels.to(model.device), alpha
        )
        for row, i in enumerate(batch):
            values = tokens[row, : len(target_ids[i])].tolist() if per_token else []
            scores[i] = Score(total[row].item(), normalized[row].item(), values)
    return scores
