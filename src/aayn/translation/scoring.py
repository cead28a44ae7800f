"""Scoring given translations (fairseq's `--score-reference`, CTranslate2's `score_batch`, marian-scorer): per pair,
log P(target | source) including eos, the GNMT-normalized score the paper's search ranks by, and on request the
log-probability of every target token. Batched by padded tokens, like translation."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..formats.aayn.engine import TorchTranslator, token_log_probs
from ..formats.translator import DECODING_BATCH_TOKENS, Score
from ..model.policy_aayn import gnmt_length_penalty


@torch.inference_mode()
def score_ids(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a padded batch (labels -100 where there is no token): per row log P (float64), the normalized score, and
    the (rows, target length) token log-probabilities (0 at padding). One forward pass, teacher-forced."""
    per_token = token_log_probs(model, input_ids, attention_mask, labels)
    total = per_token.sum(-1)
    return total, total / gnmt_length_penalty((labels != -100).sum(-1).double(), alpha), per_token


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
    model.eval()
    return TorchTranslator([model], tokenizer).score(
        sources, targets, length_penalty=length_penalty, per_token=per_token, batch_tokens=batch_tokens
    )
