"""aayn bench: the FLOP count behind the MFU against torch's counter, equal work in both arms (the same tokens
from Marian, from CTranslate2), the decoding rows' bookkeeping (not timings)."""

import importlib.util

import pytest
import torch
from tiny_models import tiny_config
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


TEXTS = ["Six one eight.", "Two two.", "Nine."] * 12  # three source lengths in each batch


@pytest.fixture(scope="module")
def bench_decoding(saved, onnx_graphs_once):
    """(setup, decoding rows, engine rows) of the tiny saved model standing in for the trained one, decoded once for
    the tests below: each row decodes every sentence several times per arm, up to the length limit (the model is
    untrained), and the engine rows export to CTranslate2 and ONNX, float32 and int8."""
    from aayn.bench.decoding import decoding_rows, engine_decoding_rows

    _, model, tokenizer = saved
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr("aayn.bench.decoding.train_demo_model", lambda steps: (model, tokenizer, TEXTS))
        setup, rows = decoding_rows(quick=True)
        engines = engine_decoding_rows(setup, quick=True) if importlib.util.find_spec("ctranslate2") else None
    return setup, rows, engines


def test_decoding_rows_time_the_default_search_against_marians_on_the_same_sentences(bench_decoding):
    """The rows' shape and bookkeeping (not timings)."""
    setup, rows, _ = bench_decoding
    assert setup.used == "demo-shaped, trained 150 steps in the bench"
    assert [row["name"] for row in rows] == ["beam4_default", "beam4_exact", "greedy_default", "pipeline"]
    for row in rows[:3]:
        assert row["sentences"] == len(TEXTS) and set(row["seconds_per_sentence"]) == {"aayn", "marian"}
        assert set(row["peak_memory_mib"]) == {"aayn", "marian"}
        assert row["time_ratio"] > 0 and row["token_rate_ratio"] > 0
    assert rows[3]["sentences_per_second"] > 0
    assert set(setup.outputs) == {"beam4_default", "beam4_exact", "greedy_default"}


def test_engine_decoding_rows_decode_the_same_sentences_and_count_differences(bench_decoding, saved):
    """CTranslate2's greedy search is ours, so its float32 outputs equal aayn's (each sentence under its own
    length limit in both, though each batch mixes three source lengths); ONNX Runtime runs aayn's own search."""
    pytest.importorskip("ctranslate2")
    _, _, rows = bench_decoding
    tokenizer = saved[2]
    assert [row["name"] for row in rows] == ["beam4_default", "greedy_default"]
    greedy = rows[1]
    assert greedy["sentences"] == len(TEXTS) and greedy["ct2"]["speed_vs_aayn"] > 0
    # each sentence under its own limit (source + 50) in both engines, though the batch mixes source lengths: the
    # same greedy search on the same float32 weights gives the same outputs
    assert len({len(tokenizer(text)["input_ids"]) for text in TEXTS}) > 1
    assert greedy["ct2"]["differ"] == greedy["ct2"]["differ_by_limit"] == 0
    assert "ct2_int8" not in greedy or greedy["ct2_int8"]["differ"] <= greedy["sentences"]
    for row in rows:  # ONNX Runtime runs aayn's own search on the same weights: the same outputs
        assert row["onnx"]["differ"] == 0 and row["onnx_int8"]["differ"] <= row["sentences"]


def test_emitted_tokens_end_at_the_first_eos_whatever_pads_the_row():
    from aayn.bench.decoding import emitted_tokens

    eos, pad = 2, 0
    sequences = torch.tensor([
        [1, 5, 6, eos, eos, eos],  # transformers' beam search pads with eos
        [1, 7, eos, pad, pad, pad],  # ours pads with pad
        [1, 5, 6, 7, 8, 9],  # no eos: cut at the limit
    ])  # fmt: skip
    assert emitted_tokens(sequences, eos) == 3 + 2 + 5


def test_attention_agreement_compares_each_implementation_with_eager_and_catches_a_wrong_one(monkeypatch):
    """The GPU command's check that SDPA (and flash attention on CUDA) compute eager's loss and
    gradients. Here on CPU: SDPA agrees; an SDPA that scales its output by 1.01 does not; flash attention, which
    this machine cannot load, gets a row saying why."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from aayn.bench import attention_agreement, token_batch

    config = tiny_config(vocab_size=300, dropout=0.1)
    batch = token_batch([5, 9, 12, 12, 14, 30], 200, config, torch.Generator().manual_seed(0), "cpu")
    rows = attention_agreement(config, batch, "cpu", None, tolerance=1e-4)
    assert [row["implementation"] for row in rows] == ["eager", "sdpa"] and all(row["ok"] for row in rows)
    assert rows[1]["gradient_difference"] < 1e-5 and rows[0]["loss"] == pytest.approx(rows[1]["loss"], rel=1e-6)

    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def off_by_one_percent(*args, **kwargs):
        output, weights = sdpa(*args, **kwargs)
        return output * 1.01, weights

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "sdpa", off_by_one_percent)
    monkeypatch.setattr(
        "aayn.bench.base_shape.attention_implementations", lambda device: ["eager", "sdpa", "flash_attention_2"]
    )
    rows = attention_agreement(config, batch, "cpu", None, tolerance=1e-4)
    assert rows[1]["ok"] is False and rows[1]["gradient_difference"] > 1e-2  # over the bench's float32 2e-3
    assert rows[2]["implementation"] == "flash_attention_2" and "Flash" in rows[2]["unavailable"]


def test_the_report_of_run_bench_prints_every_part(bench_decoding, monkeypatch, capsys):
    """The tables at the end of a long run (on a GPU, whose time is scarce) print every part that
    run_bench produced: its own report, at tiny shapes (the decoding rows above, the demo shape tiny, the training
    rows' subprocesses replaced by fixed timings), then again without its optional parts."""
    from aayn.bench import print_table, run_bench

    setup, rows, engines = bench_decoding
    monkeypatch.setattr("aayn.bench.base_shape.decoding_rows", lambda **kwargs: (setup, rows))
    monkeypatch.setattr("aayn.bench.base_shape.engine_decoding_rows", lambda *args, **kwargs: engines or [])
    monkeypatch.setattr("aayn.bench.base_shape.train_in_own_process", lambda *args: ([0.5, 0.4, 0.6], 100.0))
    tiny_shape = dict(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                      decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)  # fmt: skip
    monkeypatch.setattr("aayn.bench.base_shape.DEMO_SHAPE", tiny_shape)
    report = run_bench(quick=True, config=tiny_config(vocab_size=64))
    print_table(report)
    out = capsys.readouterr().out
    assert report["machine"] in out and report["date"] in out
    for row in report["rows"]:
        assert f"| {row['name']} | {row['unit']} | {row['aayn']:.1f} | {row['marian']:.1f} |" in out
    assert "train_bf16" in out and "training MFU (aayn / marian)" in out and "GFLOP/s" in out
    assert [row["implementation"] for row in report["attention_agreement"]][:2] == ["eager", "sdpa"]
    for row in report["attention_agreement"]:
        assert f"| {row['implementation']} |" in out
    assert report["decoding"] and all(f"| {row['name']} |" in out for row in report["decoding"][:3])
    for row in report["decoding_engines"]:
        assert f"| {row['name']} | {row['seconds_per_sentence']:.4f} |" in out
    print_table({**report, "attention_agreement": [], "decoding": None, "decoding_engines": []})
    assert "default decoding rows: skipped" in capsys.readouterr().out
