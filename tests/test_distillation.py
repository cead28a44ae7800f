"""Sequence-level distillation (`aayn distill`): the corpus it writes holds each training source with the teacher's
translation of it, as transformers' own `generate` of the same folder gives it; a kill mid-way costs only the shard
at work; the references only where asked; translations made elsewhere paired by line; the student's card says
where its targets came from; mistakes refused in one line with nothing written."""

import json

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from aayn.cli import main as aayn

SOURCES = ["one two three", "four", "five six", "seven eight nine", "two two", "three one"]
TARGETS = ["un deux trois", "quatre", "cinq six", "sept huit neuf", "deux deux", "trois un"]


def write_corpus(folder):
    folder.mkdir(parents=True)
    for split in ("train", "validation", "test"):
        (folder / f"{split}.en").write_text("".join(line + "\n" for line in SOURCES), encoding="utf-8")
        (folder / f"{split}.fr").write_text("".join(line + "\n" for line in TARGETS), encoding="utf-8")
    return folder


def generated(folder, sources):
    """The reference: plain transformers' greedy `generate` of the teacher folder, no aayn path in between."""
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        out = model.generate(**tokenizer(sources, return_tensors="pt", padding=True), num_beams=1, max_new_tokens=6)
    return [text.strip() for text in tokenizer.batch_decode(out, skip_special_tokens=True)]


def telling(expected: list[str], shard_lines: int = 2) -> list[str]:
    """`expected`, asserted to tell the faults apart: each shard's translations differ from every other shard's and
    the translations from the references, so that shards paired out of order, or the references written instead,
    cannot pass for them."""
    shards = [tuple(expected[start : start + shard_lines]) for start in range(0, len(expected), shard_lines)]
    assert len(set(shards)) == len(shards) and expected != TARGETS, expected
    return expected


def distill(teacher, corpus, output, *more):
    search = [] if "--translations" in more else ["--num_beams", "1", "--max_new_tokens", "6"]  # no search: made
    return aayn(["distill", "--model", str(teacher), "--source_lang", "en", "--target_lang", "fr", "--corpus",
                 str(corpus), "--output", str(output), *search, *more])  # fmt: skip


def killed_in_the_second_shard(monkeypatch) -> list[str]:
    """The bulk path's shards as they are begun, the second one interrupted (as a kill: out of its middle)."""
    from aayn.translation import bulk

    translated, real = [], bulk.translate_shard

    def killed_in_second(translator, shard, settings):
        translated.append(shard.name)
        if len(translated) == 2:
            raise KeyboardInterrupt
        return real(translator, shard, settings)

    monkeypatch.setattr(bulk, "translate_shard", killed_in_second)
    return translated


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_the_distilled_corpus_is_the_teachers_translations_and_a_kill_costs_one_shard(varied, tmp_path, monkeypatch):
    """Shards of 2 sources: the first run is killed (an error) in its second shard, the rerun translates the two
    missing shards only, and train.fr is generate's translation of each source in order (catches the references
    written instead, shards out of order, a rerun translating all again or keeping a half shard); the validation and
    test files are the corpus's; the work folder is gone; report.json names the teacher. The teacher's translations
    differ from shard to shard and from the references (asserted)."""
    corpus, output = write_corpus(tmp_path / "corpus"), tmp_path / "distilled"
    expected = telling(generated(varied, SOURCES))
    assert all(expected), "the tiny teacher says something for each source"
    translated = killed_in_the_second_shard(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        distill(varied, corpus, output, "--shard_lines", "2")
    assert not output.exists() and translated == ["00000.txt", "00001.txt"]
    work = tmp_path / ".distill-distilled"
    assert sorted(path.name for path in (work / "translations").iterdir()) == ["00000.txt"]
    assert distill(varied, corpus, output, "--shard_lines", "2") == 0
    assert translated == ["00000.txt", "00001.txt", "00001.txt", "00002.txt"]
    assert lines(output / "train.en") == SOURCES and lines(output / "train.fr") == expected
    assert lines(output / "test.fr") == TARGETS and lines(output / "validation.en") == SOURCES
    assert not work.exists()
    report = json.loads((output / "report.json").read_text())
    assert report["teachers"] == [str(varied)] and report["distilled_pairs"] == 6 and report["real_pairs"] == 6
    assert report["search"] == {"num_beams": 1, "max_new_tokens": 6}

    from aayn.data import load_translation_dataset
    from aayn.training.plan import distilled_from

    assert len(load_translation_dataset(str(output), source_lang="en", target_lang="fr")["train"]) == 6
    said = " ".join(distilled_from(str(output)))
    assert "Kim & Rush" in said and str(varied) in said and "6 training pairs" in said
    assert distilled_from(str(corpus)) == []  # a corpus not distilled: the card says nothing of it


def test_a_teacher_trained_again_in_its_folder_translates_every_shard_anew(saved, tmp_path, monkeypatch):
    """Killed after its first shard, then the teacher's files changed (a new training in the same folder): the rerun
    translates all three shards, none kept from the other teacher (catches a work folder keyed by path alone)."""
    import os
    import shutil

    teacher = tmp_path / "teacher"
    shutil.copytree(saved[0], teacher)
    corpus, output = write_corpus(tmp_path / "corpus"), tmp_path / "distilled"
    translated = killed_in_the_second_shard(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        distill(teacher, corpus, output, "--shard_lines", "2")
    stat = (teacher / "config.json").stat()
    os.utime(teacher / "config.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert distill(teacher, corpus, output, "--shard_lines", "2") == 0
    assert translated == ["00000.txt", "00001.txt", "00000.txt", "00001.txt", "00002.txt"]


def test_references_follow_when_asked_and_translations_made_elsewhere_are_paired_by_line(saved, tmp_path, capsys):
    """--with_references: the distilled pairs, then every real pair; --translations: the lines of a folder that
    `aayn translate --input` wrote, no teacher run here (the teacher never loaded: a wrong folder name would do);
    a translation of another length refused naming both files, nothing written, and so a search flag beside them;
    a rerun into the output refused, --overwrite replacing only distill's own folder."""
    corpus = write_corpus(tmp_path / "corpus")
    made = tmp_path / "made"
    made.mkdir()
    (made / "train.en").write_text("".join(f"t{i}\n" for i in range(6)), encoding="utf-8")
    output = tmp_path / "out"
    assert distill(saved[0], corpus, output, "--translations", str(made), "--with_references") == 0
    assert lines(output / "train.en") == SOURCES + SOURCES
    assert lines(output / "train.fr") == [f"t{i}" for i in range(6)] + TARGETS
    report = json.loads((output / "report.json").read_text())
    assert report["with_references"] is True and report["search"] is None  # the search was another command's
    capsys.readouterr()
    assert distill(saved[0], corpus, output, "--translations", str(made)) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert distill(saved[0], corpus, output, "--translations", str(made), "--overwrite") == 0
    assert lines(output / "train.fr") == [f"t{i}" for i in range(6)]
    (made / "train.en").write_text("t0\nt1\n", encoding="utf-8")
    capsys.readouterr()
    assert distill(saved[0], corpus, tmp_path / "short", "--translations", str(made)) == 2
    error = capsys.readouterr().err
    assert "has 2 lines" in error and "not a translation of it" in error and not (tmp_path / "short").exists()
    assert distill(saved[0], tmp_path / "nowhere", tmp_path / "none") == 2
    assert "--corpus" in capsys.readouterr().err and not (tmp_path / "none").exists()
    assert distill(saved[0], corpus, tmp_path / "beams", "--translations", str(made), "--num_beams", "2") == 2
    assert "--num_beams would not be used" in capsys.readouterr().err and not (tmp_path / "beams").exists()
    assert distill(saved[0], corpus, tmp_path / "ray", "--translations", str(made), "--ray") == 2
    assert "--ray would not be used" in capsys.readouterr().err and not (tmp_path / "ray").exists()
