"""Independent references for the paper's search (§6.1: beam 4, GNMT's length penalty, at most source length + 50):
a textbook beam search and greedy decoding written out one sentence at a time, full forward passes, no cache, no
early stop. The tests of the search (test_paper_decoding, test_generate_options, test_ensemble, test_scoring,
test_peft) compare with them."""

import math

import torch
from tiny_models import tiny_config

from aayn import AaynForConditionalGeneration


def model_for(**overrides):
    torch.manual_seed(0)
    return AaynForConditionalGeneration(tiny_config(**overrides)).double().eval()


@torch.no_grad()
def reference_beam_search(model, source, k, alpha, limit, banned=None, stop_at_k_finished=False, normalize=True):
    """Textbook beam search with fairseq's rules: 2k candidates per step by log P; an eos among the first k
    finishes a hypothesis, scored log P / ((5 + |Y|) / 6)^alpha with |Y| counting eos; the first k others live on.
    Runs to the length limit (eos is the only choice there), so nothing depends on an early-stopping bound (unless
    `stop_at_k_finished`: transformers' early_stopping=True). Pad is never chosen (fairseq's rule); `banned(tokens,
    step)` names more words a hypothesis may not take next (away from the limit). `normalize=False`: the model's
    "logits" are the scores themselves (an ensemble's averaged log-probabilities)."""
    eos, start, pad = model.config.eos_token_id, model.config.decoder_start_token_id, model.config.pad_token_id
    live, finished = [([], 0.0)], []
    for step in range(1, limit + 1):
        candidates = []
        for beam, (tokens, log_p) in enumerate(live):
            logits = model(input_ids=source[None], decoder_input_ids=torch.tensor([[start, *tokens]])).logits[0, -1]
            log_probs = torch.log_softmax(logits.double(), -1) if normalize else logits.double().clone()
            if step == limit:
                log_probs = torch.where(torch.arange(len(log_probs)) == eos, log_probs, -math.inf)
            else:
                for word in {pad} | (banned(tokens, step) if banned else set()):
                    log_probs[word] = -math.inf
            candidates += [(log_p + log_probs[w].item(), beam, w) for w in range(len(log_probs))]
        candidates.sort(key=lambda c: -c[0])
        top = candidates[: 2 * k]
        for i, (value, beam, word) in enumerate(top[:k]):
            if word == eos and value > -math.inf:
                finished.append((value / ((5 + step) / 6) ** alpha, live[beam][0] + [eos]))
        live = [(live[beam][0] + [word], value) for value, beam, word in top if word != eos][:k]
        if stop_at_k_finished and len(finished) >= k:
            break
    return sorted(finished, key=lambda f: -f[0])


@torch.no_grad()
def reference_greedy(model, source, alpha, limit):
    """The likeliest token at each step, full forward passes, until eos or the limit (eos forced there)."""
    eos, start = model.config.eos_token_id, model.config.decoder_start_token_id
    tokens, log_p = [], 0.0
    for step in range(1, limit + 1):
        logits = model(input_ids=source[None], decoder_input_ids=torch.tensor([[start, *tokens]])).logits[0, -1]
        log_probs = torch.log_softmax(logits.double(), -1)
        log_probs[model.config.pad_token_id] = -math.inf  # never chosen (fairseq's rule)
        word = eos if step == limit else int(log_probs.argmax())
        tokens, log_p = tokens + [word], log_p + log_probs[word].item()
        if word == eos:
            return [(log_p / ((5 + step) / 6) ** alpha, tokens)]
