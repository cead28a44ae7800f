"""`aayn pipeline RECIPE`, the whole way from a corpus and monolingual text to an int8 student, as a user runs it:
killed in the middle of a step and run again, it does only what was missing (the steps before it untouched, the
killed one again); run again unchanged, it does nothing; with one step's settings changed, that step and every step
after it run, none before. Recipes with mistakes are refused in one line before anything runs."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from training_helpers import FAST, tiny_recipe, write_numbers_corpus, write_recipe

from aayn.cli import main as aayn

ALL = ["corpus", "clean", "backward", "back-translation", "mixed", "teacher", "teacher-finetuned", "teacher-2",
       "teacher-2-finetuned", "distilled", "student", "student-int8", "evaluation"]  # fmt: skip


def pipeline(recipe):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "aayn.cli", "pipeline", str(recipe)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip


def finished(recipe):
    process = pipeline(recipe)
    out, err = process.communicate(timeout=900)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])["ran"], err


def translations(capsys, models, sources: list[str]) -> list[str]:
    """`aayn translate` of `sources` by `models` (two: an ensemble), with the pipeline's distill flags."""
    command = ["translate", *(part for model in models for part in ("--model", str(model))), "--max_new_tokens", "8"]
    capsys.readouterr()
    assert aayn([*command, *sources]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_killed_pipeline_reruns_only_what_is_missing_and_a_changed_step_reruns_what_follows(tmp_path, capsys):
    """Besides what the module says: the ensemble's translations are what the distilled corpus holds (catches an
    ensemble that uses its first model alone), speed is counted over the sentences translated, and a file a step
    reads, changed on disk, reruns that step and those after it."""
    corpus = write_numbers_corpus(tmp_path / "numbers", sizes=(("train", 120), ("validation", 8), ("test", 8)))
    mono = write_numbers_corpus(tmp_path / "mono", sizes=(("train", 24),), seed=5) / "train.fr"
    model = write_recipe(tmp_path / "tiny.yaml", tiny_recipe(corpus, tmp_path / "unused", **FAST))
    student = write_recipe(tmp_path / "student.yaml", tiny_recipe(corpus, tmp_path / "unused", **FAST, d_model=16))
    out = tmp_path / "run"
    recipe = {
        "source_lang": "en", "target_lang": "fr", "output_dir": str(out), "corpus": str(corpus),
        "monolingual": str(mono), "clean": ["--processes", "1"], "backward": {"recipe": str(model)},
        "translate": ["--max_new_tokens", "8", "--sampling", "--sampling_topk", "10"], "mix": ["--noise"],
        "teacher": {"recipe": str(model), "ensemble": 2},
        "finetune": {"recipe": str(model), "flags": ["--max_steps", "2"]}, "distill": ["--max_new_tokens", "8"],
        "student": {"recipe": str(student)},
        "evaluate": ["--max_samples", "4", "--max_new_tokens", "8"],
    }  # fmt: skip
    path = write_recipe(tmp_path / "pipeline.yaml", recipe)
    notes = out / ".pipeline"
    process = pipeline(path)
    while not (notes / "teacher.started").is_file():  # the teacher's command just begun: kill the whole group
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = {name: (notes / f"{name}.json").stat().st_mtime_ns for name in ALL[:5]}
    assert not (notes / "teacher.json").exists() and not (out / "distilled").exists()

    ran, err = finished(path)
    assert list(ran) == ALL[5:]  # the killed step and those after it; nothing before
    assert "[6/13] teacher: resumed" in err and "[1/13] corpus: up to date" in err
    assert before == {name: (notes / f"{name}.json").stat().st_mtime_ns for name in ALL[:5]}
    distilled = json.loads((out / "distilled" / "report.json").read_text())
    assert distilled["real_pairs"] == len((out / "clean" / "train.en").read_text(encoding="utf-8").splitlines())
    # the curriculum's teachers, an ensemble of two, distill
    assert distilled["teachers"] == [str(out / "teacher-finetuned"), str(out / "teacher-2-finetuned")]
    assert f"fine-tuned from {out / 'teacher-2'}" in (out / "teacher-2-finetuned" / "README.md").read_text()
    from aayn.cli.pipeline import load_recipe, steps_of

    argv = {step.name: step.argv for step in steps_of(load_recipe(str(path)))}
    assert argv["teacher-finetuned"][argv["teacher-finetuned"].index("--dataset_name") + 1] == str(out / "clean")
    seed = yaml.safe_load(model.read_text())["seed"]
    assert argv["teacher-2"][-2:] == ["--seed", str(seed + 1)] and "--seed" not in argv["teacher"]
    assert (out / "student-int8" / "model.bin").is_file()
    # mix's --noise given through the recipe: the mixture says so, and its synthetic sources are not the
    # back-translations as written (catches the pipeline dropping mix's flags)
    mixed = json.loads((out / "mixed" / "report.json").read_text())
    sources = (out / "mixed" / "train.en").read_text(encoding="utf-8").splitlines()
    synthetic = [line.removeprefix("<BT> ") for line in sources if line.startswith("<BT> ")]
    written = (out / "back-translation" / "train.fr").read_text(encoding="utf-8").splitlines()
    assert mixed["noise"] is True and synthetic and synthetic != [line for line in written if line.strip()]
    # the back-translation sampled, as `aayn translate --sampling` draws it
    assert aayn(["translate", "--model", str(out / "backward"), "--input", str(mono), "--output_dir",
                 str(tmp_path / "sampled"), *recipe["translate"]]) == 0  # fmt: skip
    back = (out / "back-translation" / "train.fr").read_text(encoding="utf-8")
    assert back == (tmp_path / "sampled" / "train.fr").read_text(encoding="utf-8")
    scores = json.loads((out / "evaluation" / "scores.json").read_text())
    assert list(scores) == ["teacher", "teacher-2", "teacher-finetuned", "teacher-2-finetuned", "student",
                            "student-int8"]  # fmt: skip
    assert all("bleu" in row for row in scores.values())
    # speed over the sentences translated: --max_samples 4 of the 8 test lines (catches the split's 8 counted)
    assert {row["sentences"] for row in scores.values()} == {4}
    # the ensemble distilled: its translations are those of both teachers together, not the first one's alone
    # (of the sources it kept: a blank translation is left out)
    sources = (out / "distilled" / "train.en").read_text(encoding="utf-8").splitlines()
    both, first = (
        translations(capsys, [out / name for name in names], sources)
        for names in (["teacher-finetuned", "teacher-2-finetuned"], ["teacher-finetuned"])
    )
    assert (out / "distilled" / "train.fr").read_text(encoding="utf-8").splitlines() == both
    assert sources and both != first  # the two can be told apart
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Cleaning" in report and "| student-int8 |" in report and "synthetic pairs" in report
    assert "](report.svg)" in report
    bars_are_the_scores_to_scale(out / "report.svg", scores)
    for name in ("student", "student-int8"):  # each card states itself beside the teachers that distilled it
        card = (out / name / "README.md").read_text(encoding="utf-8")
        for model, what in (("teacher-finetuned", "teacher"), ("teacher-2-finetuned", "teacher"), (name, "this model")):
            row = scores[model]
            assert f"| {model} ({what}) | {row['bleu']} | {row['chrf']} | {row['megabytes']} |" in card

    assert finished(path)[0] == {}  # nothing changed: nothing runs
    write_recipe(student, tiny_recipe(corpus, tmp_path / "unused", **FAST, d_model=32))  # a file it reads, changed
    assert list(finished(path)[0]) == ["student", "student-int8", "evaluation"]
    assert json.loads((out / "student" / "config.json").read_text())["d_model"] == 32


def test_an_evaluation_run_again_replaces_the_cards_comparison_keeping_what_follows(tmp_path):
    from aayn.cli.pipeline import AGAINST, stated_against_teachers

    (tmp_path / "distilled").mkdir()
    (tmp_path / "distilled" / "report.json").write_text(json.dumps({"teachers": [str(tmp_path / "teacher")]}))
    (tmp_path / "student").mkdir()
    card = tmp_path / "student" / "README.md"
    card.write_text("# student\n\n## Training\n\nsaid\n", encoding="utf-8")
    row = {"bleu": 1.0, "chrf": 2.0, "megabytes": 3.0, "sentences_per_second": 4.0}
    stated_against_teachers(tmp_path, {"teacher": row, "student": row})
    card.write_text(card.read_text(encoding="utf-8") + "\n## Later\n\nkept\n", encoding="utf-8")
    stated_against_teachers(tmp_path, {"teacher": row, "student": {**row, "bleu": 9.5}})
    text = card.read_text(encoding="utf-8")
    assert (
        text.count(AGAINST) == 1
        and "| student (this model) | 9.5 |" in text
        and "| student (this model) | 1.0 |" not in text
    )
    assert text.startswith("# student\n\n## Training\n\nsaid\n") and "## Later\n\nkept" in text


def bars_are_the_scores_to_scale(svg, scores):
    """The chart: per measure, a bar per model in order, its length the model's value over the largest of them
    times the chart's width (the scale written out; catches a bar of another model's or measure's value)."""
    import xml.etree.ElementTree as ET

    rects = ET.parse(svg).getroot().findall("{http://www.w3.org/2000/svg}rect")
    for key in ("bleu", "chrf", "megabytes", "sentences_per_second"):
        widths = [float(rect.get("width")) for rect in rects if rect.get("class") == key]
        top = max(row[key] for row in scores.values()) or 1e-9
        assert widths == pytest.approx([200 * row[key] / top for row in scores.values()], abs=0.06), key


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"colour": "red"}, "unknown key 'colour'"),
        ({"teacher": None}, "no teacher"),
        ({"student": "recipes/demo.yaml"}, "student is {recipe: RECIPE.yaml"),
        ({"clean": "--language"}, "clean is a list of flags"),
        ({"backward": None}, "monolingual text needs a backward model"),
        ({"monolingual": None, "backward": None, "finetune": {"recipe": "r.yaml"}}, "it needs monolingual text"),
        ({"teacher": {"recipe": "r.yaml", "ensemble": 0}}, "teacher's ensemble is how many teachers"),
    ],
)
def test_a_recipe_with_a_mistake_is_refused_in_one_line_before_anything_runs(tmp_path, capsys, change, said):
    recipe = {"source_lang": "en", "target_lang": "fr", "output_dir": str(tmp_path / "run"), "corpus": "bible",
              "monolingual": "mono.txt", "backward": {"recipe": "r.yaml"}, "teacher": {"recipe": "r.yaml"},
              "student": {"recipe": "r.yaml"}}  # fmt: skip
    recipe.update(change)
    recipe = {key: value for key, value in recipe.items() if value is not None}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    assert aayn(["pipeline", str(path)]) == 2
    assert said in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_a_step_folder_the_pipeline_did_not_write_is_refused(tmp_path, capsys):
    (tmp_path / "run" / "corpus").mkdir(parents=True)
    (tmp_path / "run" / "corpus" / "mine.txt").write_text("keep me", encoding="utf-8")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"source_lang": "en", "target_lang": "fr", "output_dir": str(tmp_path / "run"),
                                    "corpus": "bible", "teacher": {"recipe": "r.yaml"},
                                    "student": {"recipe": "r.yaml"}}), encoding="utf-8")  # fmt: skip
    assert aayn(["pipeline", str(path)]) == 2
    assert "this pipeline did not write it" in capsys.readouterr().err
    assert (tmp_path / "run" / "corpus" / "mine.txt").read_text() == "keep me"


def test_the_shipped_recipe_names_the_steps_from_the_corpus_to_the_int8_student():
    from pathlib import Path

    from aayn.cli.pipeline import load_recipe, steps_of

    recipe = load_recipe(str(Path(__file__).resolve().parents[1] / "recipes" / "pipeline-bible.yaml"))
    steps = {step.name: step.argv for step in steps_of(recipe)}
    assert list(steps) == ["corpus", "clean", "teacher", "distilled", "student", "student-int8", "evaluation"]
    assert steps["student"][steps["student"].index("--d_model") + 1] == "64"
    assert steps["teacher"][steps["teacher"].index("--dataset_name") + 1] == "runs/pipeline-bible/clean"
    assert steps["student-int8"][-2:] == ["--quantization", "int8"]


def test_the_shipped_back_translation_recipe_reads_the_halves_the_benchmark_writes():
    """Its corpus and monolingual text are the paths `benchmarks/backtranslation_bible.py --halves_only` writes
    (catches the two drifting apart), its synthetic sources tagged, not noised, and its teacher fine-tuned."""
    from pathlib import Path

    from aayn.cli.pipeline import load_recipe, steps_of

    root = Path(__file__).resolve().parents[1]
    recipe = load_recipe(str(root / "recipes" / "pipeline-bible-backtranslation.yaml"))
    steps = {step.name: step.argv for step in steps_of(recipe)}
    assert list(steps) == ["corpus", "clean", "backward", "back-translation", "mixed", "teacher", "teacher-finetuned",
                           "distilled", "student", "student-int8", "evaluation"]  # fmt: skip
    script = (root / "benchmarks" / "backtranslation_bible.py").read_text(encoding="utf-8")
    assert 'default="runs/bench-bt"' in script and 'out / "parallel", out / "mono" / "fr.txt"' in script
    assert recipe["corpus"] == "runs/bench-bt/parallel" and recipe["monolingual"] == "runs/bench-bt/mono/fr.txt"
    assert "--noise" not in steps["mixed"] and "--model_name_or_path" in steps["teacher-finetuned"]


def test_a_failing_step_stops_the_run_naming_it_and_its_reason(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"source_lang": "en", "target_lang": "fr", "output_dir": str(tmp_path / "run"),
                                    "corpus": str(tmp_path / "nowhere"), "teacher": {"recipe": "r.yaml"},
                                    "student": {"recipe": "r.yaml"}}), encoding="utf-8")  # fmt: skip
    process = pipeline(path)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 2
    assert "no such folder" in err and "step corpus failed (exit 2)" in err and "aayn pipeline: error" in err
    assert not (tmp_path / "run" / ".pipeline" / "corpus.json").exists()


def test_a_steps_fingerprint_follows_its_command_the_files_it_reads_and_the_steps_before(tmp_path):
    """make's rule, one input at a time: the same inputs give the same fingerprint; another flag, a file it reads
    rewritten (or one added to a folder it reads), another fingerprint of a step before each give another (catches
    any of the three left out)."""
    from aayn.cli.pipeline import Step, fingerprint

    text, folder = tmp_path / "mono.txt", tmp_path / "corpus"
    text.write_text("un\n", encoding="utf-8")
    folder.mkdir()
    (folder / "train.en").write_text("one\n", encoding="utf-8")
    step = Step("x", ["python", "-m", "aayn.cli", "mix", "--ratio", "1"], [str(text), str(folder)], ["clean"])
    first = fingerprint(step, {"clean": "a"})
    assert fingerprint(step, {"clean": "a"}) == first
    assert fingerprint(Step("x", [*step.argv[:-1], "2"], step.reads, step.after), {"clean": "a"}) != first
    assert fingerprint(step, {"clean": "b"}) != first
    text.write_text("deux\n", encoding="utf-8")
    second = fingerprint(step, {"clean": "a"})
    (folder / "train.fr").write_text("un\n", encoding="utf-8")
    assert len({first, second, fingerprint(step, {"clean": "a"})}) == 3


def test_a_steps_report_without_its_counts_is_an_error_naming_the_step(tmp_path):
    """Catches the report saying "? pairs kept of ?" where the clean step's report lacks its counts."""
    from aayn.cli.pipeline import report

    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "report.json").write_text(json.dumps({"pairs": 10}), encoding="utf-8")
    row = {"bleu": 1.0, "chrf": 2.0, "megabytes": 3.0, "sentences": 4, "sentences_per_second": 5.0}
    with pytest.raises(ValueError, match="step clean: .* has no count 'kept'"):
        report(tmp_path, {"student": row})
    (tmp_path / "clean" / "report.json").write_text(json.dumps({"pairs": 10, "kept": 9}), encoding="utf-8")
    assert "9 pairs kept of 10." in report(tmp_path, {"student": row})
