"""`aayn clean` (`aayn.data.cleaning`): each rule on written cases, each beside a pair it must keep; language
identification on texts of known language; the kept and removed files together equal to the input, the same with
worker processes; the dual cross-entropy and source gain formulas against the scores `aayn score` prints; a failed
or refused run leaving nothing, and a rerun replacing only what aayn clean wrote."""

import json

import pytest

from aayn.cli import main as aayn
from aayn.data.cleaning import CleaningRules, clean_pairs, foreign_letters, pair_rule

RULES = CleaningRules("en", "fr", max_words=12, max_word_chars=20)

# (source, target, the rule that removes it) and, beside each, a pair that rule must keep
CASES = [
    (("  ", "Bonjour."), "empty", ("Hi.", "Salut.")),
    (("Hello\x07 there.", "Bonjour."), "unprintable", ("Hello\tthere.", "Bonjour\tlà.")),
    (("Paris is big.", "paris is big. "), "identical", ("Paris.", "Paris !")),
    (("one " * 13, "un " * 13), "length", ("one " * 12, "un " * 12)),
    (("A very long sentence indeed, it goes on.", "Oui."), "ratio", ("Yes, of course.", "Oui, bien sûr !")),
    (("See aaaaaaaaaaaaaaaaaaaaaaaaa.", "Voir aaaaaaaaaaaaaaaaaaaaaaaaa."), "long_word",
     ("See https://example.com/a/very/long/path/indeed.", "Voir https://example.com/a/very/long/path/indeed.")),
    (("I have 3 cats and 12 dogs.", "J'ai 3 chats et 13 chiens."), "numbers",
     ("I have 3 cats and 12 dogs.", "J'ai 12 chiens et 3 chats.")),
    (("Go to www.a.org now.", "Allez sur www.b.org maintenant."), "urls",
     ("Go to www.a.org now.", "Allez sur www.a.org maintenant.")),
    (("Good morning.", "Доброе утро."), "script", ("Good morning, Zoë.", "Bonjour, Zoë.")),
]  # fmt: skip


@pytest.mark.parametrize("removed, rule, kept", CASES, ids=[case[1] for case in CASES])
def test_each_rule_removes_its_case_and_keeps_its_neighbour(removed, rule, kept):
    """Catches a rule that is off, too wide (the kept neighbour) or named wrong."""
    assert pair_rule(*removed, RULES) == rule
    assert pair_rule(*kept, RULES) is None


def test_foreign_letters_count_letters_outside_the_languages_scripts_only():
    assert foreign_letters("Привет мир", "ru") == 0.0 and foreign_letters("Привет мир", "en") == 1.0
    assert foreign_letters("日本語とカタカナ", "ja") == 0.0 and foreign_letters("abc 123 !!", "en") == 0.0
    assert foreign_letters("ab Пр", "fr") == 0.5 and foreign_letters("anything", "xx") == 0.0  # unknown: judged not


def test_duplicates_exact_then_near_the_first_kept_and_streamed_in_order():
    pairs = [("The cat.", "Le chat."), ("The dog.", "Le chien."), ("The cat.", "Le chat."), ("the CAT!", "le chat"),
             ("The cat 2.", "Le chat 2."), ("The dog.", "Le chien !")]  # fmt: skip
    out = list(clean_pairs(pairs, CleaningRules("en", "fr"), chunk_size=2))
    assert [(line, rule) for line, _, _, rule in out] == [
        (1, None), (2, None), (3, "duplicate"), (4, "near_duplicate"), (5, None), (6, "near_duplicate")
    ]  # fmt: skip
    assert [(s, t) for _, s, t, _ in out] == pairs


def test_language_identification_on_texts_of_known_language():
    """Lingua among the pair's languages and the candidates: a German or an English target of an en-fr pair is
    removed, a French one kept (sentences long enough to be known), and so is a pair of numbers, which no detector
    can place."""
    pytest.importorskip("lingua")
    from aayn.cli.clean import language_detector

    rules = CleaningRules("en", "fr", language=True)
    english = "The children are playing in the garden behind the old house."
    pairs = [(english, "Les enfants jouent dans le jardin derrière la vieille maison."),
             (english, "Die Kinder spielen im Garten hinter dem alten Haus."),
             (english, "The children are playing in the big garden behind the house."),
             ("Les enfants jouent dans le jardin derrière la maison.", "Les enfants jouent dehors."),
             ("3:16 (1)", "3:16 (1)!")]  # fmt: skip
    rules_only = [rule for *_, rule in clean_pairs(pairs, CleaningRules("en", "fr"))]
    judged = [rule for *_, rule in clean_pairs(pairs, rules, detector=language_detector(rules))]
    assert rules_only == [None] * 5 and judged == [None, "language", "language", "language", None]


def write_corpus(folder, pairs):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "c.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (folder / "c.fr").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return folder / "c.en", folder / "c.fr"


NOISY = [(f"Verse {i} of the book.", f"Verset {i} du livre.") for i in range(1, 40)] + [
    ("Verse 3 of the book.", "Verset 3 du livre."), ("", "Vide."), ("Same.", "Same."), ("x" * 80, "y"),
    ("Chapter 7.", "Chapitre 8."), ("Hello.", "Привет."),
]  # fmt: skip


@pytest.mark.parametrize("processes", [1, 2])
def test_the_kept_and_the_removed_are_the_input_and_the_report_counts_them(tmp_path, processes, capsys):
    """Kept lines (in order) merged with the removed ones by line number give back every input pair; the same with
    two worker processes and chunks of 7 (catches a lost, doubled or reordered pair across chunks)."""
    source, target = write_corpus(tmp_path / "in", NOISY)
    out = tmp_path / "clean"
    args = ["clean", "--source_lang", "en", "--target_lang", "fr", "--source", str(source), "--target", str(target),
            "--output", str(out), "--processes", str(processes)]  # fmt: skip
    from aayn.data import cleaning

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cleaning, "CHUNK", 7)
        assert aayn(args) == 0
    kept = list(zip((out / "train.en").read_text().splitlines(), (out / "train.fr").read_text().splitlines()))
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    rebuilt, kept_iter = [], iter(kept)
    by_line = {row["line"]: (row["source"], row["target"]) for row in removed}
    for line in range(1, len(NOISY) + 1):
        rebuilt.append(by_line[line] if line in by_line else next(kept_iter))
    assert rebuilt == NOISY and next(kept_iter, None) is None
    assert sorted(row["rule"] for row in removed) == sorted(
        ["duplicate", "empty", "identical", "ratio", "numbers", "script"]
    )
    report = json.loads((out / "report.json").read_text())
    assert report["pairs"] == len(NOISY) and report["kept"] == len(kept) == 39
    assert sum(report["removed"].values()) == len(removed) and "| numbers | 1 |" in (out / "report.md").read_text()
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["kept"] == 39


def test_a_refused_or_failed_run_leaves_nothing_and_a_rerun_replaces_only_its_own(tmp_path, capsys):
    source, target = write_corpus(tmp_path / "in", NOISY)
    short = tmp_path / "short.fr"
    short.write_text("Un.\n", encoding="utf-8")
    out = tmp_path / "clean"
    base = ["clean", "--source_lang", "en", "--target_lang", "fr", "--output", str(out), "--processes", "1"]
    assert aayn([*base, "--source", str(source), "--target", str(short)]) == 2  # not line-aligned, found at line 2
    assert "ends at line 1" in capsys.readouterr().err and not out.exists()
    assert not list(tmp_path.glob(".staging-*"))
    assert aayn([*base, "--source", str(source), "--target", str(target)]) == 0
    assert aayn([*base, "--source", str(source), "--target", str(target)]) == 2  # exists: refused
    assert "exists and is not empty" in capsys.readouterr().err
    assert aayn([*base, "--source", str(source), "--target", str(target), "--overwrite"]) == 0
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "report.json").write_text("{}")
    assert aayn([*base[:-4], "--output", str(theirs), "--source", str(source), "--target", str(target),
                 "--overwrite"]) == 2  # fmt: skip
    assert "did not write" in capsys.readouterr().err and (theirs / "report.json").read_text() == "{}"
    assert aayn([*base, "--source", str(source), "--target", str(target), "--max_ratio", "0.5"]) == 2
    assert "max_ratio must be at least 1" in capsys.readouterr().err


@pytest.fixture(scope="module")
def backward(saved, tmp_path_factory) -> str:
    """A second untrained model of the same vocabulary, drawn from another seed, as the backward model: with one
    folder for both, swapping --forward and --backward would change nothing a test could see."""
    import torch

    from aayn import AaynForConditionalGeneration

    folder = tmp_path_factory.mktemp("backward")
    torch.manual_seed(1)
    AaynForConditionalGeneration(saved[1].config).save_pretrained(folder)
    saved[2].save_pretrained(folder)
    return str(folder)


def model_scores(forward: str, backward: str, sources: list[str], targets: list[str]) -> list[tuple[float, float]]:
    """`aayn clean`'s (dual cross-entropy, source gain) of each pair, as its scorer computes them."""
    from argparse import Namespace

    from aayn.cli.arguments import DECODING_BATCH_TOKENS
    from aayn.cli.clean import ModelScores

    args = Namespace(forward=forward, backward=backward, device="cpu", batch_tokens=DECODING_BATCH_TOKENS,
                     min_source_gain=0.0)  # fmt: skip
    return ModelScores(args)(sources, targets)


def test_the_dual_cross_entropy_is_the_formula_over_the_scores_aayn_score_prints(tmp_path, saved, backward, capsys):
    """|H_f - H_b| + (H_f + H_b) / 2 with H the negated log P per target token (eos included) that `aayn score
    --per_token` prints, forward on (source, target) and backward on (target, source); a limit between the pairs'
    scores removes exactly the one above it (catches a side swapped, the two models swapped, a sum for the mean, a
    sentence-level H)."""
    model = str(saved[0])
    pairs = [("one two three", "un deux trois"), ("four five", "quatre cinq"), ("six seven", "six sept")]
    source, target = write_corpus(tmp_path / "in", pairs)

    def entropies(folder, src, tgt):
        assert aayn(["score", "--model", folder, "--source", str(src), "--target", str(tgt), "--per_token"]) == 0
        printed = capsys.readouterr().out.splitlines()
        return [-float(cols.split("\t")[0]) / len(cols.split("\t")[2].split()) for cols in printed]

    there, back = entropies(model, source, target), entropies(backward, target, source)
    assert there != entropies(backward, source, target)  # the models differ: a swap would show
    expected = [abs(f - b) + (f + b) / 2 for f, b in zip(there, back)]
    scored = model_scores(model, backward, *(list(side) for side in zip(*pairs)))
    assert [dual for dual, _ in scored] == pytest.approx(expected, rel=1e-5)
    limit = sorted(expected)[1] + 1e-4  # the two lowest kept
    out = tmp_path / "clean"
    assert aayn(["clean", "--source_lang", "en", "--target_lang", "fr", "--source", str(source), "--target",
                 str(target), "--output", str(out), "--processes", "1", "--forward", model, "--backward", backward,
                 "--max_dual_cross_entropy", str(limit), "--keep_number_mismatches"]) == 0  # fmt: skip
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    assert [row["line"] for row in removed] == [1 + max(range(3), key=expected.__getitem__)]
    assert {row["rule"] for row in removed} == {"cross_entropy"}


def test_the_source_gain_is_the_formula_over_the_scores_of_each_pair_and_the_next(tmp_path, saved, backward, capsys):
    """((H_f(y|x') - H_f(y|x)) + (H_b(x|y') - H_b(x|y))) / 2, with (x', y') the next pair (the last's: the first)
    and H the per-token cross-entropies `aayn score --per_token` prints; a limit between the two lowest gains removes
    exactly the lowest, as source_gain, and no other rule runs on the models (catches the partner not moved, a side
    swapped, the two models swapped, the sign turned)."""
    model = str(saved[0])
    pairs = [("one two three", "un deux trois"), ("four five", "quatre cinq"), ("six seven", "six sept"),
             ("eight", "huit")]  # fmt: skip
    source, target = write_corpus(tmp_path / "in", pairs)
    following, followed = write_corpus(tmp_path / "next", pairs[1:] + pairs[:1])

    def entropies(folder, src, tgt):
        assert aayn(["score", "--model", folder, "--source", str(src), "--target", str(tgt), "--per_token"]) == 0
        printed = capsys.readouterr().out.splitlines()
        return [-float(cols.split("\t")[0]) / len(cols.split("\t")[2].split()) for cols in printed]

    there, back = entropies(model, source, target), entropies(backward, target, source)
    there_other, back_other = entropies(model, following, target), entropies(backward, followed, source)
    gains = [((fo - f) + (bo - b)) / 2 for f, b, fo, bo in zip(there, back, there_other, back_other)]
    scored = model_scores(model, backward, *(list(side) for side in zip(*pairs)))
    assert [gain for _, gain in scored] == pytest.approx(gains, rel=1e-5, abs=1e-6)
    lowest, second = sorted(gains)[:2]
    out = tmp_path / "clean"
    assert aayn(["clean", "--source_lang", "en", "--target_lang", "fr", "--source", str(source), "--target",
                 str(target), "--output", str(out), "--processes", "1", "--forward", model, "--backward", backward,
                 "--min_source_gain", str((lowest + second) / 2), "--keep_number_mismatches"]) == 0  # fmt: skip
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    assert [(row["line"], row["rule"]) for row in removed] == [(1 + gains.index(lowest), "source_gain")]
    assert json.loads((out / "report.json").read_text())["rules"]["max_dual_cross_entropy"] is None
    assert aayn(["clean", "--source_lang", "en", "--target_lang", "fr", "--source", str(source), "--target",
                 str(target), "--output", str(tmp_path / "no"), "--forward", model, "--backward",
                 model]) == 2  # fmt: skip
    assert "--max_dual_cross_entropy or --min_source_gain" in capsys.readouterr().err
