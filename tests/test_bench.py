"""aayn bench: the FLOP count behind the MFU against torch's counter, equal work in both arms (the same tokens
from Marian, from CTranslate2), the decoding rows' bookkeeping (not timings)."""

import pytest
import torch
from conftest import tiny_config
from torch.utils.flop_counter import FlopCounterMode

from aayn import AaynForConditionalGeneration
from aayn.bench import equal_models, forward_flops, padded_batch


def test_flop_count_equals_torchs_flop_counter():
    """Eager attention, whose matmuls the counter sees (it has no formula for torch's CPU SDPA kernel)."""
    config = tiny_config(encoder_ffn_dim=48, decoder_ffn_dim=80, decoder_layers=3)
    config._attn_implementation = "eager"
    model = AaynForConditionalGeneration(config).eval()
    source, mask = padded_batch([7, 5, 3], config, torch.Generator().manual_seed(0))
    target, _ = padded_batch([6, 6, 2], config, torch.Generator().manual_seed(1))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=source, attention_mask=mask, decoder_input_ids=target)
    assert forward_flops(config, 3, source.shape[1], target.shape[1]) == counter.get_total_flops()


def test_both_arms_do_equal_work_on_the_same_function():
    models = equal_models(tiny_config(dropout=0.0), "cpu", torch.float32)
    source, mask = padded_batch([9, 4, 6], tiny_config(), torch.Generator().manual_seed(0))
    outputs = {}
    for name, model in models.items():
        extra = {"paper_decoding": False} if name == "aayn" else {}
        outputs[name] = model.eval().generate(
            source, attention_mask=mask, num_beams=4, do_sample=False, max_new_tokens=7, min_new_tokens=7, **extra
        )
    assert outputs["aayn"].shape == outputs["marian"].shape == (3, 8)  # start token + 7 new for every sentence
    assert torch.equal(outputs["aayn"], outputs["marian"])


def test_ctranslate2_arms_do_the_same_work_on_the_same_function(tmp_path):
    """float32: the very tokens of our model; int8 weights: as many tokens, and scores close to ours."""
    pytest.importorskip("ctranslate2")
    from aayn.bench import ctranslate2_translators

    models = equal_models(tiny_config(dropout=0.0), "cpu", torch.float32)
    translators, tokens = ctranslate2_translators(models["aayn"], tmp_path)
    assert set(translators) == {"ct2", "ct2_int8"}
    source, mask = padded_batch([9, 4, 6], tiny_config(), torch.Generator().manual_seed(0))
    ours = (
        models["aayn"]
        .eval()
        .generate(
            source,
            attention_mask=mask,
            num_beams=1,
            do_sample=False,
            max_new_tokens=7,
            min_new_tokens=7,
            paper_decoding=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    )
    log_probs = torch.stack(ours.logits, 1).log_softmax(-1).gather(-1, ours.sequences[:, 1:, None]).sum((1, 2))
    sources = [[tokens[i] for i in row[:length]] for row, length in zip(source.tolist(), mask.sum(1).tolist())]
    for arm, translator in translators.items():
        results = translator.translate_batch(sources, beam_size=1, min_decoding_length=7, max_decoding_length=7)
        hypotheses = [[tokens.index(t) for t in result.hypotheses[0]] for result in results]
        if arm == "ct2":
            assert hypotheses == ours.sequences[:, 1:].tolist()
        else:
            assert [len(h) for h in hypotheses] == [7, 7, 7]
        # log-probabilities of our greedy tokens under each export (score_batch also scores the final </s>)
        scored = translator.score_batch(sources, [[tokens[i] for i in row] for row in ours.sequences[:, 1:].tolist()])
        theirs = torch.tensor([sum(s.log_probs[:7]) for s in scored])
        tolerance = 1e-4 if arm == "ct2" else 0.1
        torch.testing.assert_close(theirs, log_probs, atol=tolerance * 7, rtol=0)


def test_decoding_rows_time_the_default_search_against_marians_on_the_same_sentences(saved, monkeypatch):
    """The rows' shape and bookkeeping (not timings), with the tiny saved model standing in for the trained one."""
    from aayn.bench.decoding import decoding_rows

    _, model, tokenizer = saved
    monkeypatch.setattr(
        "aayn.bench.decoding.train_demo_model", lambda steps: (model, tokenizer, ["Six one eight."] * 40)
    )
    used, rows = decoding_rows(quick=True)
    assert used == "demo-shaped, trained 150 steps in the bench"
    assert [row["name"] for row in rows] == ["beam4_default", "beam4_exact", "greedy_default", "pipeline"]
    for row in rows[:3]:
        assert row["sentences"] == 40 and set(row["seconds_per_sentence"]) == {"aayn", "marian"}
        assert set(row["peak_memory_mib"]) == {"aayn", "marian"}
        assert row["time_ratio"] > 0 and row["token_rate_ratio"] > 0
    assert rows[3]["sentences_per_second"] > 0


def test_emitted_tokens_end_at_the_first_eos_whatever_pads_the_row():
    from aayn.bench.decoding import emitted_tokens

    eos, pad = 2, 0
    sequences = torch.tensor([
        [1, 5, 6, eos, eos, eos],  # transformers' beam search pads with eos
        [1, 7, eos, pad, pad, pad],  # ours pads with pad
        [1, 5, 6, 7, 8, 9],  # no eos: cut at the limit
    ])  # fmt: skip
    assert emitted_tokens(sequences, eos) == 3 + 2 + 5
