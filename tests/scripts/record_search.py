"""The search's outputs on fixed models and inputs, every option it serves: `python tests/scripts/record_search.py
OUT.json` writes them; tests/test_search_recorded.py decodes the same cases and compares with the record made
before the search was split into its own files (tests/data/search_recorded.json). The models are float64, so that
another CPU's float rounding (another matmul kernel) cannot flip a choice between candidates: the tokens must
match exactly, the scores to 1e-10."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import tiny_config

from aayn import AaynForConditionalGeneration, generate_ensemble

VOCAB = 14
# (name, generate's keyword arguments); each case decodes the same padded batch of four sentences
CASES = [
    ("greedy", dict(num_beams=1)),
    ("greedy, alpha 1, no cache", dict(num_beams=1, length_penalty=1.0, use_cache=False)),
    ("beam 4, the paper's", dict(num_beams=4, length_penalty=0.6)),
    ("beam 4, 3 returned", dict(num_beams=4, num_return_sequences=3)),
    ("beam 2, alpha 0", dict(num_beams=2, length_penalty=0.0)),
    ("beam 3, negative alpha", dict(num_beams=3, length_penalty=-0.5, num_return_sequences=2)),
    ("beam 4, max_new_tokens 5", dict(num_beams=4, max_new_tokens=5)),
    ("beam 4, max_length 7", dict(num_beams=4, max_length=7)),
    ("beam 4, min_new_tokens 6", dict(num_beams=4, min_new_tokens=6, max_new_tokens=12)),
    ("beam 4, min_length 4", dict(num_beams=4, min_length=4, max_new_tokens=12)),
    ("beam 4, no_repeat_ngram_size 2", dict(num_beams=4, no_repeat_ngram_size=2, max_new_tokens=12)),
    ("greedy, no_repeat_ngram_size 1", dict(num_beams=1, no_repeat_ngram_size=1, max_new_tokens=12)),
    ("beam 4, bad words", dict(num_beams=4, bad_words_ids=[[5], [6, 7], [8, 9, 10]], max_new_tokens=12)),
    ("beam 4, early_stopping True", dict(num_beams=4, early_stopping=True, num_return_sequences=2)),
    ("beam 4, early_stopping False", dict(num_beams=4, early_stopping=False)),
    ("beam 4, no cache", dict(num_beams=4, use_cache=False, max_new_tokens=10)),
    ("beam 4, eager", dict(num_beams=4, num_return_sequences=2, _attn="eager")),
    ("beam 4, flex (the unfolded cache)", dict(num_beams=4, num_return_sequences=2, _attn="flex_attention")),
    ("greedy, flex (the unfolded cache)", dict(num_beams=1, _attn="flex_attention")),
    ("beam 4, target prefix", dict(num_beams=4, num_return_sequences=2, _prefix=True)),
    ("greedy, target prefix", dict(num_beams=1, _prefix=True, max_new_tokens=6)),
    ("ensemble of 2, log_probs", dict(num_beams=4, num_return_sequences=2, _ensemble="log_probs")),
    ("ensemble of 2, probs", dict(num_beams=3, _ensemble="probs", max_new_tokens=9)),
    ("beam 4, outputs", dict(num_beams=4, _outputs=True, max_new_tokens=6)),
]


def model(seed: int, attn: str = "sdpa") -> AaynForConditionalGeneration:
    torch.manual_seed(seed)
    config = tiny_config(vocab_size=VOCAB)
    config._attn_implementation = attn
    built = AaynForConditionalGeneration(config).double().eval()
    # eos likelier (by e^1.5), so that hypotheses end at different steps and every stopping rule decides
    logits = built.output_logits
    eos_bias = torch.zeros(VOCAB, dtype=torch.float64).index_fill(0, torch.tensor([config.eos_token_id]), 1.5)
    built.output_logits = lambda hidden_states: logits(hidden_states) + eos_bias.to(hidden_states.dtype)
    return built


def inputs():
    generator = torch.Generator().manual_seed(1234)
    ids = torch.randint(4, VOCAB, (4, 7), generator=generator)
    mask = torch.ones_like(ids)
    for row, n in enumerate([7, 2, 5, 3]):
        ids[row, n:], mask[row, n:] = 0, 0
    prefix = torch.tensor([[1, 5, 6, 0], [1, 7, 0, 0], [1, 0, 0, 0], [1, 9, 8, 4]])  # start token, then up to 3
    return ids, mask, prefix


def decode(options: dict) -> dict:
    options = dict(options)
    attn, prefix, ensemble, outputs = (options.pop(key, None) for key in ("_attn", "_prefix", "_ensemble", "_outputs"))
    ids, mask, prefix_ids = inputs()
    kwargs = dict(attention_mask=mask, **options)
    if prefix:
        kwargs.update(decoder_input_ids=prefix_ids, decoder_attention_mask=(prefix_ids != 0).long())
    if ensemble:
        out = generate_ensemble([model(0), model(1)], ids, average=ensemble, return_dict_in_generate=True, **kwargs)
        return {"sequences": out.sequences.tolist(), "scores": out.sequences_scores.tolist()}
    if outputs:
        kwargs.update(output_scores=True, output_attentions=True, output_hidden_states=True)
    out = model(0, attn or "sdpa").generate(ids, return_dict_in_generate=True, **kwargs)
    record = {"sequences": out.sequences.tolist(), "scores": out.sequences_scores.tolist()}
    if outputs:
        # checksums summed in float64: a float32 sum's order (the CPU's vector width) changes its last bit
        record["step_scores"] = [step.double().sum().item() for step in out.scores]
        record["attentions"] = [sum(a.double().sum().item() for a in step) for step in out.decoder_attentions]
        record["cross_attentions"] = [sum(a.double().sum().item() for a in step) for step in out.cross_attentions]
        record["hidden_states"] = [sum(h.double().sum().item() for h in step) for step in out.decoder_hidden_states]
    return record


if __name__ == "__main__":
    import transformers.integrations.flex_attention as flex
    from torch.nn.attention.flex_attention import flex_attention

    # uncompiled, as in test_generation.py (torch.compile's CPU code generation fails for these kernels)
    flex.compile_friendly_flex_attention = lambda q, k, v, training=False, **kw: flex_attention(q, k, v, **kw)
    with torch.no_grad():
        record = {name: decode(options) for name, options in CASES}
    Path(sys.argv[1]).write_text(json.dumps(record, indent=1) + "\n")
