"""BLEU comparable with the paper's EN-DE numbers (tensor2tensor's get_ende_bleu.sh: Moses tokenization, compound
splitting, multi-bleu.perl), checked on fixed strings against tokenizations and a score computed by hand."""

import math

import pytest

from aayn.metrics.paper_bleu import atat, paper_bleu, tokenized_for_paper_bleu

HYPOTHESES = ["Das ist ein Test-Fall.", "Der Hund-Halter kam."]
REFERENCES = ["Das ist ein Test-Fall.", "Der Hunde-Halter kam heute."]


def test_tokenization_and_compound_splitting_as_get_ende_bleu():
    assert tokenized_for_paper_bleu(HYPOTHESES) == [
        "Das ist ein Test ##AT##-##AT## Fall .",
        "Der Hund ##AT##-##AT## Halter kam .",
    ]
    assert tokenized_for_paper_bleu(['A & B "x" 3-4']) == ["A &amp; B &quot; x &quot; 3 ##AT##-##AT## 4"]
    assert atat("x-y-z a-b") == "x ##AT##-##AT## y-z a ##AT##-##AT## b"  # perl's /g: non-overlapping, left to right


def test_corpus_bleu_on_those_tokens_equals_the_hand_computed_score():
    """Tokens: hypotheses 7 + 6 = 13, references 7 + 7 = 14. Matched n-grams over the corpus: 1-grams 7 + 5 of
    7 + 6, 2-grams 6 + 2 of 6 + 5, 3-grams 5 + 1 of 5 + 4, 4-grams 4 + 0 of 4 + 3; brevity penalty e^(1 - 14/13)."""
    precisions = [12 / 13, 8 / 11, 6 / 9, 4 / 7]
    expected = 100 * math.exp(1 - 14 / 13) * math.exp(sum(map(math.log, precisions)) / 4)
    assert paper_bleu(HYPOTHESES, REFERENCES) == pytest.approx(expected, rel=1e-9)
    assert paper_bleu(REFERENCES, REFERENCES) == pytest.approx(100.0)
    assert paper_bleu(["Der Hund-Halter kam."], ["Der Hunde-Halter kam heute."]) == 0.0  # no 4-gram: multi-bleu's 0


def test_aayn_evaluate_into_german_reports_both_bleus(saved, tmp_path):
    from aayn.translation.evaluation import evaluate_model

    folder, _, _ = saved
    data = tmp_path / "ende"
    data.mkdir()
    (data / "test.en").write_text("six one\ntwo\n", encoding="utf-8")
    (data / "test.de").write_text("sechs eins\nzwei\n", encoding="utf-8")
    scores = evaluate_model(str(folder), str(data), source_lang="en", target_lang="de", max_new_tokens=4)
    assert {"bleu", "chrf", "paper_bleu", "paper_bleu_signature"} <= set(scores)
    french = tmp_path / "enfr"
    french.mkdir()
    (french / "test.en").write_text("six one\n", encoding="utf-8")
    (french / "test.fr").write_text("six un\n", encoding="utf-8")
    assert "paper_bleu" not in evaluate_model(
        str(folder), str(french), source_lang="en", target_lang="fr", max_new_tokens=4
    )


def test_the_trainers_metrics_into_german_add_paper_bleu(saved):
    """`aayn train`'s compute_metrics (validation and test): paper_bleu beside sacreBLEU for German targets only."""
    import numpy as np
    from transformers import EvalPrediction

    from aayn.training.trainer import translation_metrics

    _, _, tokenizer = saved
    texts = ["six un huit neuf zéro", "deux trois quatre cinq"]  # 4-grams in each: unsmoothed BLEU is not 0
    ids = tokenizer(text_target=texts, padding=True, return_tensors="np")["input_ids"]
    prediction = EvalPrediction(predictions=ids, label_ids=np.where(ids == tokenizer.pad_token_id, -100, ids))
    german = translation_metrics(tokenizer, "de")(prediction)
    assert german["paper_bleu"] == pytest.approx(100.0) and german["bleu"] == pytest.approx(100.0)
    assert "paper_bleu" not in translation_metrics(tokenizer, "fr")(prediction)
