"""Back-translation (`aayn.data.synthetic`, `aayn mix`): Edunov et al.'s noise against its definition, and the way a
user runs it: a reverse model's `aayn translate --input` of monolingual shards, then `aayn mix` beside real pairs;
the tag on synthetic sources only, each synthetic target its monolingual line, the real pairs repeated to the
ratio, the folder read by the loader, mistakes refused in one line with nothing written."""

import json
import random

import pytest

from aayn.cli import main as aayn
from aayn.data.synthetic import FILLER, noised, real_copies


def test_the_noise_drops_blanks_and_moves_words_fewer_than_k_places_as_defined():
    """Over 2,000 sentences of distinct words: about 10% dropped and 10% blanked (within 1.5 points); each kept word
    at most 2 places from its place among the kept (catches a wider shuffle, none, no drops); with
    shuffle=1 and no drop or blank the sentence is unchanged; a sentence noised to nothing is kept whole."""
    rng, words, dropped, blanked, moved = random.Random(0), 0, 0, 0, 0
    for n in range(2000):
        sentence = [f"w{n}_{i}" for i in range(12)]
        out = noised(" ".join(sentence), rng).split()
        words += len(sentence)
        blanked += out.count(FILLER)
        dropped += len(sentence) - len(out)
        kept = [word for word in sentence if word in out]  # the kept real words, in their first order
        placed = [word for word in out if word != FILLER]
        moved = max(moved, *(abs(kept.index(w) - placed.index(w)) for w in placed)) if placed else moved
    assert abs(dropped / words - 0.1) < 0.015 and abs(blanked / words - 0.1) < 0.015
    assert moved == 2  # j passes i only where j - i < U(0, 3) - U(0, 3) < 3: two places at most, and reached
    assert noised("a b c d e", random.Random(1), drop=0, blank=0, shuffle=1) == "a b c d e"
    assert noised("a b", random.Random(1), drop=1.0) == "a b"


def test_real_copies_keep_the_ratio_and_never_leave_real_pairs_out():
    assert real_copies(100, 300, 1.0) == 3 and real_copies(100, 300, 3.0) == 1 and real_copies(100, 20, 1.0) == 1
    with pytest.raises(ValueError, match="--ratio must be positive"):
        real_copies(100, 300, 0)


def write_lines(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_a_reverse_model_translates_monolingual_shards_and_mix_writes_a_corpus(saved, tmp_path, capsys):
    """The whole step as a user runs it, an untrained reverse model of the numbers corpus: `aayn translate --input
    mono/ --output_dir bt/` (the bulk path), then `aayn mix --ratio 2`: 6 synthetic pairs over 1 real copy of 3,
    tagged and noised sources, every synthetic target its monolingual line, the real pairs untagged as given."""
    model = str(saved[0])
    mono = [f"un deux trois {word}" for word in ("quatre", "cinq", "six", "sept", "huit", "neuf")]
    write_lines(tmp_path / "mono" / "a.txt", mono[:4])
    write_lines(tmp_path / "mono" / "b.txt", mono[4:])
    real = [("one two", "un deux"), ("three", "trois"), ("four five", "quatre cinq")]
    for split in ("train", "validation", "test"):
        write_lines(tmp_path / "real" / f"{split}.en", [s for s, _ in real])
        write_lines(tmp_path / "real" / f"{split}.fr", [t for _, t in real])
    assert aayn(["translate", "--model", model, "--input", str(tmp_path / "mono"), "--output_dir",
                 str(tmp_path / "bt"), "--max_new_tokens", "6"]) == 0  # fmt: skip
    translations = [line for name in ("a.txt", "b.txt") for line in (tmp_path / "bt" / name).read_text().splitlines()]
    out = tmp_path / "mixed"
    mix = ["mix", "--source_lang", "en", "--target_lang", "fr", "--real", str(tmp_path / "real"), "--synthetic_source",
           str(tmp_path / "bt"), "--synthetic_target", str(tmp_path / "mono"), "--output", str(out), "--ratio", "2",
           "--noise"]  # fmt: skip
    assert aayn(mix) == 0
    sources, targets = ((out / f"train.{lang}").read_text().splitlines() for lang in ("en", "fr"))
    assert len(sources) == len(targets) == 6 + 3
    synthetic = [i for i, line in enumerate(sources) if line.startswith("<BT> ")]
    assert len(synthetic) == 6 and [targets[i] for i in synthetic] == mono
    assert [(sources[i], targets[i]) for i in range(9) if i not in synthetic] == real
    noised_words = [set(sources[i].split()[1:]) - {FILLER} for i in synthetic]
    assert all(words <= set(line.split()) for words, line in zip(noised_words, translations))
    # each source noised, one draw a line from --seed's generator (`noised` is held to its definition above), and
    # not left as translated (catches --noise doing nothing, or each line drawn from a fresh generator)
    rng = random.Random(1)
    assert [sources[i] for i in synthetic] == [f"<BT> {noised(line, rng)}" for line in translations]
    assert any(sources[i] != f"<BT> {line}" for i, line in zip(synthetic, translations))
    report = json.loads((out / "report.json").read_text())
    assert (report["real_copies"], report["synthetic_pairs"], report["ratio"], report["noise"]) == (1, 6, 2.0, True)
    assert (out / "test.fr").read_text() == (tmp_path / "real" / "test.fr").read_text()
    from aayn.data import load_translation_dataset

    assert len(load_translation_dataset(str(out), source_lang="en", target_lang="fr")["train"]) == 9
    capsys.readouterr()
    assert aayn(mix) == 2 and "exists and is not empty" in capsys.readouterr().err
    assert aayn([*mix, "--overwrite", "--ratio", "0.5", "--tag", ""]) == 0  # 12 real per 6 synthetic, no tag
    sources = (out / "train.en").read_text().splitlines()
    assert len(sources) == 6 + 4 * 3 and not any(line.startswith("<BT>") for line in sources)
    write_lines(tmp_path / "short" / "a.txt", translations[:3])
    write_lines(tmp_path / "short" / "b.txt", translations[4:])
    assert aayn([*mix[:-9], "--synthetic_source", str(tmp_path / "short"), "--synthetic_target", str(tmp_path / "mono"),
                 "--output", str(tmp_path / "bad")]) == 2  # fmt: skip
    assert "not a translation of it" in capsys.readouterr().err and not (tmp_path / "bad").exists()
