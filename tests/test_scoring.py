"""Scoring given translations: against a plain forward's log-softmax summed in float64, one pair at a time, and
against the paper's search's own `sequences_scores` for its outputs; the `aayn score` command prints one line per
pair in input order."""

import math

import pytest
import torch
from tiny_models import random_batch, tiny_config

from aayn import AaynForConditionalGeneration
from aayn.cli import main as aayn
from aayn.translation.scoring import score_ids, score_texts

SOURCES = ["six one eight", "two", "nine nine nine zero one", "", "three four"]
TARGETS = ["six un huit", "deux", "neuf neuf neuf zéro un", "un", ""]


@torch.no_grad()
def reference(model, tokenizer, source: str, target: str, alpha: float):
    """log P(target | source), eos included, from one unbatched float64 forward; and its normalized score."""
    model = model.double()
    source_ids = torch.tensor([tokenizer(source)["input_ids"]])
    target_ids = tokenizer(text_target=target)["input_ids"]
    decoder_input = torch.tensor([[model.config.decoder_start_token_id, *target_ids[:-1]]])
    logits = model(input_ids=source_ids, decoder_input_ids=decoder_input).logits[0].double()
    per_token = [torch.log_softmax(logits[t], -1)[w].item() for t, w in enumerate(target_ids)]
    return math.fsum(per_token), math.fsum(per_token) / ((5 + len(target_ids)) / 6) ** alpha, per_token


def test_scores_equal_a_plain_forward_in_float64(saved):
    _, model, tokenizer = saved
    model = AaynForConditionalGeneration(model.config)
    model.load_state_dict(saved[1].state_dict())
    model = model.double().eval()
    scores = score_texts(model, tokenizer, SOURCES, TARGETS, length_penalty=0.6, per_token=True, batch_tokens=12)
    assert len(scores) == len(SOURCES)
    for pair, source, target in zip(scores, SOURCES, TARGETS):
        log_prob, normalized, per_token = reference(model, tokenizer, source, target, 0.6)
        assert pair.log_prob == pytest.approx(log_prob, rel=1e-9)
        assert pair.score == pytest.approx(normalized, rel=1e-9)
        assert pair.tokens == pytest.approx(per_token, rel=1e-9)
    assert score_texts(model, tokenizer, SOURCES, TARGETS)[0].tokens == []  # per-token values only on request


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_the_search_outputs_score_their_sequences_scores(alpha):
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(tiny_config(vocab_size=12)).double().eval()
    source, mask = random_batch(3, 6, 12, [6, 2, 4])
    out = model.generate(source, attention_mask=mask, num_beams=4, num_return_sequences=3, length_penalty=alpha,
                         max_new_tokens=9, return_dict_in_generate=True)  # fmt: skip
    labels = out.sequences[:, 1:].clone()
    eos = model.config.eos_token_id
    for row in labels:  # -100 after each hypothesis' eos
        end = row.tolist().index(eos) + 1
        row[end:] = -100
    _, normalized, _ = score_ids(model, source.repeat_interleave(3, 0), mask.repeat_interleave(3, 0), labels, alpha)
    torch.testing.assert_close(normalized, out.sequences_scores, rtol=1e-9, atol=0)


def test_aayn_score_prints_one_line_per_pair_in_input_order(saved, tmp_path, capsys):
    folder, model, tokenizer = saved
    (tmp_path / "src.txt").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (tmp_path / "hyp.txt").write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    flags = [
        "score",
        "--model",
        str(folder),
        "--source",
        str(tmp_path / "src.txt"),
        "--target",
        str(tmp_path / "hyp.txt"),
    ]
    assert aayn([*flags, "--length_penalty", "1.0", "--per_token", "--batch_tokens", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = score_texts(model, tokenizer, SOURCES, TARGETS, length_penalty=1.0, per_token=True)
    assert len(lines) == len(SOURCES)
    for line, pair in zip(lines, expected):
        log_prob, score, tokens = line.split("\t")
        # float32 log-probabilities summed: at |log P| ~ 40 one float32 step is 4e-6, and another batch's padding
        # (--batch_tokens 8 here) may move the last bits
        assert float(log_prob) == pytest.approx(pair.log_prob, abs=1e-5)
        assert float(score) == pytest.approx(pair.score, abs=1e-5)
        assert [float(v) for v in tokens.split()] == pytest.approx(pair.tokens, abs=2e-6)
    (tmp_path / "short.txt").write_text("deux\n", encoding="utf-8")
    assert aayn([*flags[:-1], str(tmp_path / "short.txt")]) == 2
    assert "has 5 lines" in capsys.readouterr().err
    assert aayn([*flags[:-1], str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt: no such file" in capsys.readouterr().err


def test_nbest_lists_are_ranked_as_the_search_ranks_them(saved, tmp_path, capsys, monkeypatch):
    """`aayn translate --nbest N`: every input's N best hypotheses with their scores, in the search's order; the
    scores are what scoring the texts gives; the pipeline returns the same N with num_return_sequences."""
    import io
    import json

    from transformers import pipeline

    folder, model, tokenizer = saved
    sources = ["six one eight", "", "two zero"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("\n".join(sources).encode() + b"\n")))
    assert aayn(["translate", "--model", str(folder), "--nbest", "3", "--num_beams", "4", "--max_new_tokens", "6"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 2, 2, 2]  # a blank line: one empty hypothesis
    for index in (0, 2):
        mine = [(float(r[1]), r[2]) for r in rows if int(r[0]) == index]
        assert [s for s, _ in mine] == sorted((s for s, _ in mine), reverse=True)
        out = model.generate(**tokenizer([sources[index]], return_tensors="pt"), num_beams=4, num_return_sequences=3,
                             max_new_tokens=6, return_dict_in_generate=True)  # fmt: skip
        assert [t for _, t in mine] == [
            t.strip() for t in tokenizer.batch_decode(out.sequences, skip_special_tokens=True)
        ]
        assert [s for s, _ in mine] == pytest.approx(out.sequences_scores.tolist(), abs=1e-4)  # batched: float32
        translate = pipeline("translation", model=str(folder), trust_remote_code=True)
        piped = translate(sources[index], num_beams=4, num_return_sequences=3, max_new_tokens=6)
        assert [p["translation_text"] for p in piped] == [t for _, t in mine]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"two zero\n")))
    assert (
        aayn(["translate", "--model", str(folder), "--nbest", "2", "--format", "jsonl", "--max_new_tokens", "6"]) == 0
    )
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["index"], r["rank"]) for r in records] == [(0, 0), (0, 1)] and records[0]["score"] >= records[1]["score"]
    assert aayn(["translate", "--model", str(folder), "--format", "jsonl", "two"]) == 2
    assert "needs --nbest" in capsys.readouterr().err


@pytest.mark.parametrize("k", [1, 3])
def test_target_prefixes_of_different_lengths_continue_inside_the_papers_search(k):
    """Each sentence continues from its own prefix (right-padded with pad); the score counts every token, prefix
    included. Reference: the brute-force search of test_paper_decoding, constrained to the prefix."""
    from reference_search import reference_beam_search

    torch.manual_seed(0)
    model = AaynForConditionalGeneration(tiny_config(vocab_size=12)).double().eval()
    start, vocab = model.config.decoder_start_token_id, 12
    lengths = [6, 2, 4]
    source, mask = random_batch(3, 6, vocab, lengths)
    prefixes = [[7, 9, 5], [], [10]]
    decoder_input_ids = torch.zeros(3, 4, dtype=torch.long)  # pad is 0
    for row, prefix in enumerate(prefixes):
        decoder_input_ids[row, : 1 + len(prefix)] = torch.tensor([start, *prefix])
    out = model.generate(source, attention_mask=mask, decoder_input_ids=decoder_input_ids, num_beams=k,
                         length_penalty=0.6, max_new_tokens=7, return_dict_in_generate=True)  # fmt: skip
    for row, n in enumerate(lengths):
        prefix = prefixes[row]

        def banned(tokens, step, prefix=prefix):
            return set(range(vocab)) - {prefix[step - 1]} if step <= len(prefix) else set()

        limit = len(prefix) + 7  # max_new_tokens counts the tokens after the prefix
        [(score, tokens)] = reference_beam_search(model, source[row, :n], k, 0.6, limit, banned=banned)[:1]
        assert tokens[: len(prefix)] == prefix
        assert out.sequences[row, 1 : 1 + len(tokens)].tolist() == tokens
        assert out.sequences_scores[row].item() == pytest.approx(score, rel=1e-6)
    plain = model.generate(source, attention_mask=mask, num_beams=k, length_penalty=0.6, max_new_tokens=7)
    assert torch.equal(out.sequences[1, : plain.shape[1]], plain[1])  # an empty prefix changes nothing
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        model.generate(source, attention_mask=mask, decoder_input_ids=decoder_input_ids[:, 1:])


def test_aayn_translate_continues_each_line_from_its_prefix(saved, tmp_path, capsys):
    folder, model, tokenizer = saved
    (tmp_path / "prefix.txt").write_text("six un\n\n", encoding="utf-8")
    flags = ["translate", "--model", str(folder), "--max_new_tokens", "5", "--num_beams", "2"]
    assert aayn([*flags, "--prefix", str(tmp_path / "prefix.txt"), "six one eight", "two zero"]) == 0
    with_prefix = capsys.readouterr().out.splitlines()
    assert aayn([*flags, "two zero"]) == 0
    assert with_prefix[1] == capsys.readouterr().out.strip()  # an empty prefix line: a plain translation
    assert with_prefix[0].startswith("six un")
    ids = [model.config.decoder_start_token_id, *tokenizer(text_target="six un", add_special_tokens=False)["input_ids"]]
    out = model.generate(**tokenizer(["six one eight"], return_tensors="pt"), decoder_input_ids=torch.tensor([ids]),
                         max_new_tokens=5, num_beams=2)  # fmt: skip
    assert with_prefix[0] == tokenizer.decode(out[0], skip_special_tokens=True).strip()
    assert aayn([*flags, "--prefix", str(tmp_path / "prefix.txt"), "one line only"]) == 2
    assert "has 2 lines for 1 inputs" in capsys.readouterr().err
