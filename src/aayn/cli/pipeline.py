"""`aayn pipeline RECIPE`: from the corpus a team has to the model it ships, each step an aayn command of its own
with a folder of its own under the recipe's `output_dir`:

    corpus -> clean -> backward -> back-translation -> mixed -> teacher -> teacher-finetuned -> distilled
    -> student -> student-int8 -> evaluation (report.md, report.svg)

(backward, back-translation and mixed only where the recipe names `monolingual` text; teacher-finetuned, Firefox's
translations curriculum, the teacher of the mixed pairs trained further on the real pairs alone, where it names
`finetune`: that teacher then distills; teacher-2, ... beside the first with `teacher: {ensemble: N}`, each with
its own seed, the teachers then distilling as an ensemble). A rerun does only what is missing or changed, by make's
rule: a step runs again where what it read (its command line, the files it was given, the steps before it) differs
from what its last finished run read, and every step after it follows. A step killed mid-way is resumed where its
command can resume (training from its newest complete checkpoint, the bulk path's and distill's finished shards);
the others start over in their own folder. The back-translation and the distillation run on Ray with `--ray` among
their flags (`translate`, `distill`). The pipeline's notes lie in `OUTPUT/.pipeline/`: STEP.started (what a
run began with) and STEP.json (what it finished with)."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

NOTES = ".pipeline"
SECTIONS = {  # the recipe's keys: what each holds
    "source_lang": "the source language code", "target_lang": "the target language code",
    "output_dir": "the folder of every step's folder", "corpus": "a dataset aayn train reads (a folder, bible, ...)",
    "monolingual": "target-language text to back-translate (a file, a folder of shards or a glob)",
    "clean": "aayn clean's flags", "backward": "the reverse model's training: {recipe, flags}",
    "translate": "the back-translation's aayn translate flags", "mix": "aayn mix's flags",
    "teacher": "{recipe, flags, ensemble: N (default 1)}",
    "finetune": "the teacher trained further on the real pairs alone: {recipe, flags}",
    "distill": "aayn distill's flags", "student": "{recipe, flags}",
    "export": "aayn export's flags (default: --quantization int8)", "evaluate": "aayn evaluate's flags",
}  # fmt: skip
TRAINED = ("backward", "teacher", "finetune", "student")  # the sections of a model's training


@dataclass
class Step:
    name: str
    argv: list[str]  # after `python -m`: the command that makes the step's folder
    reads: list[str] = field(default_factory=list)  # user files and folders it reads (their sizes and times count)
    after: list[str] = field(default_factory=list)  # the steps whose folders it reads
    then: object = None  # what the pipeline does in the folder once the command is done (a callable)
    trained: bool = False  # an aayn train run: a killed one resumes from its newest complete checkpoint


def load_recipe(path: str) -> dict:
    import yaml

    try:
        recipe = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such recipe") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path} is not YAML: {error}") from None
    if not isinstance(recipe, dict):
        raise ValueError(f"{path}: a pipeline recipe is a mapping of {', '.join(SECTIONS)}")  # noqa: TRY004 (a user's)
    unknown = sorted(set(recipe) - set(SECTIONS))
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r} (a pipeline recipe holds {', '.join(SECTIONS)})")
    for key in ("source_lang", "target_lang", "output_dir", "corpus", "teacher", "student"):
        if not recipe.get(key):
            raise ValueError(f"{path}: no {key} ({SECTIONS[key]})")
    for key in TRAINED:
        if key in recipe and not (isinstance(recipe[key], dict) and recipe[key].get("recipe")):
            raise ValueError(f"{path}: {key} is {{recipe: RECIPE.yaml, flags: [...]}}, got {recipe[key]!r}")
    for key in ("clean", "translate", "mix", "distill", "export", "evaluate"):
        if not isinstance(recipe.get(key, []), list):
            raise ValueError(f"{path}: {key} is a list of flags, got {recipe[key]!r}")  # noqa: TRY004
    if recipe.get("monolingual") and "backward" not in recipe:
        raise ValueError(f"{path}: monolingual text needs a backward model (backward: {{recipe: ...}})")
    ensemble = recipe["teacher"].get("ensemble", 1)
    if not isinstance(ensemble, int) or isinstance(ensemble, bool) or ensemble < 1:
        raise ValueError(f"{path}: teacher's ensemble is how many teachers train and distill together (1: one), "
                         f"got {ensemble!r}")  # fmt: skip
    if "finetune" in recipe and not recipe.get("monolingual"):
        raise ValueError(f"{path}: finetune trains the teacher of the real and back-translated pairs further on "
                         "the real ones alone: it needs monolingual text to back-translate")  # fmt: skip
    return recipe


def flags(recipe: dict, key: str, default=()) -> list[str]:
    value = recipe.get(key)
    value = value.get("flags", []) if isinstance(value, dict) else value
    return [str(flag) for flag in (value if value is not None else default)]


def steps_of(recipe: dict) -> list[Step]:
    """The recipe's steps in order, each with its command line and what it reads (paths from the current folder,
    as aayn train's)."""
    out = Path(recipe["output_dir"])
    src, tgt = str(recipe["source_lang"]), str(recipe["target_lang"])
    aayn = [sys.executable, "-m", "aayn.cli"]
    corpus = str(recipe["corpus"])
    reads = [corpus] if Path(corpus).exists() else []  # a local folder: its files count; a name (bible): itself
    steps = [Step("corpus", [sys.executable, "-m", "aayn.cli.pipeline", "--write_corpus", corpus, src, tgt,
                             str(out / "corpus")], reads)]  # fmt: skip
    steps.append(Step("clean", [*aayn, "clean", "--source_lang", src, "--target_lang", tgt, "--source",
                                str(out / "corpus" / f"train.{src}"), "--target", str(out / "corpus" / f"train.{tgt}"),
                                "--output", str(out / "clean"), *flags(recipe, "clean")], after=["corpus"],
                      then=held_out_copied(out / "corpus", src, tgt)))  # fmt: skip

    def train(name: str, dataset: str, source: str, target: str, section: str = "", start: str = "",
              more=()) -> Step:  # fmt: skip
        """A model of the recipe's `section` (default: `name`) trained on the step `dataset`'s folder, from the step
        `start`'s model where one is given, with `more` flags after the section's."""
        section = section or name
        recipe_file = str(recipe[section]["recipe"])
        argv = [sys.executable, "-m", "aayn.train", recipe_file, "--dataset_name", str(out / dataset),
                "--source_lang", source, "--target_lang", target, "--output_dir", str(out / name), "--report_to",
                "none", *(["--model_name_or_path", str(out / start)] if start else []),
                *flags(recipe, section), *more]  # fmt: skip
        return Step(name, argv, [recipe_file], [dataset, *([start] if start else [])], trained=True)

    teacher_data = "clean"
    if recipe.get("monolingual"):
        mono = str(recipe["monolingual"])
        steps.append(train("backward", "clean", tgt, src))
        steps.append(Step("back-translation", [*aayn, "translate", "--model", str(out / "backward"), "--input", mono,
                                               "--output_dir", str(out / "back-translation"),
                                               *flags(recipe, "translate")], [mono], ["backward"]))  # fmt: skip
        steps.append(Step("mixed", [*aayn, "mix", "--source_lang", src, "--target_lang", tgt, "--real",
                                    str(out / "clean"), "--synthetic_source", str(out / "back-translation"),
                                    "--synthetic_target", mono, "--output", str(out / "mixed"), *flags(recipe, "mix")],
                          [mono], ["clean", "back-translation"]))  # fmt: skip
        teacher_data = "mixed"
    teachers, trained_teachers = [], []
    for k in range(1, recipe["teacher"].get("ensemble", 1) + 1):
        name = "teacher" if k == 1 else f"teacher-{k}"
        seed = [] if k == 1 else ["--seed", str(recipe_seed(recipe, "teacher") + k - 1)]
        steps.append(train(name, teacher_data, src, tgt, section="teacher", more=seed))
        trained_teachers.append(name)
        if "finetune" in recipe:
            steps.append(train(f"{name}-finetuned", "clean", src, tgt, section="finetune", start=name))
            name = f"{name}-finetuned"
        teachers.append(name)
    ensemble = [part for name in teachers for part in ("--model", str(out / name))]
    steps.append(Step("distilled", [*aayn, "distill", *ensemble, "--source_lang", src, "--target_lang", tgt,
                                    "--corpus", str(out / "clean"), "--output", str(out / "distilled"),
                                    *flags(recipe, "distill")], after=[*teachers, "clean"]))  # fmt: skip
    steps.append(train("student", "distilled", src, tgt))
    steps.append(Step("student-int8", [*aayn, "export", "--model", str(out / "student"), "--format", "ctranslate2",
                                       "--output_dir", str(out / "student-int8"),
                                       *flags(recipe, "export", ["--quantization", "int8"])],
                      after=["student"]))  # fmt: skip
    models = list(dict.fromkeys([*trained_teachers, *teachers, "student", "student-int8"]))
    steps.append(Step("evaluation", [sys.executable, "-m", "aayn.cli.pipeline", "--evaluate", str(out), src, tgt,
                                     ",".join(models), *flags(recipe, "evaluate")],
                      after=[*models, "clean"]))  # fmt: skip
    return steps


def recipe_seed(recipe: dict, section: str) -> int:
    """The seed a section's training runs with: its flags' --seed, else its recipe file's, else transformers'."""
    import yaml

    given, seed = flags(recipe, section), None
    for i, flag in enumerate(given):  # the last --seed wins, as in aayn train's parser
        if flag.startswith("--seed="):
            seed = flag.split("=", 1)[1]
        elif flag == "--seed" and i + 1 < len(given):
            seed = given[i + 1]
    if seed is not None:
        return int(seed)
    path = Path(str(recipe[section]["recipe"]))
    read = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    return int(read.get("seed", 42)) if isinstance(read, dict) else 42


def held_out_copied(corpus: Path, src: str, tgt: str):
    """After aayn clean: the corpus's validation and test files beside the kept pairs (a folder aayn train reads)."""
    from .mix import copy_held_out

    return lambda folder: copy_held_out(corpus, folder, (src, tgt))


def fingerprint(step: Step, finished: dict[str, str]) -> str:
    """What the step reads, hashed: its command, each given file's path, size and time (a folder's files'), and the
    fingerprints of the steps before it."""
    seen = {"argv": step.argv[1:], "after": {name: finished[name] for name in step.after}, "reads": {}}
    for name in step.reads:
        path = Path(name)
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path] if path.exists() else []
        seen["reads"][name] = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()[:16]


def run_pipeline(recipe_path: str, log=print) -> dict:
    """Every step that is missing or changed, in order; the summary of what ran."""
    recipe = load_recipe(recipe_path)
    out = Path(recipe["output_dir"])
    notes = out / NOTES
    notes.mkdir(parents=True, exist_ok=True)
    steps = steps_of(recipe)
    finished, ran = {}, {}
    for number, step in enumerate(steps, start=1):
        print_ = f"[{number}/{len(steps)}] {step.name}"
        current = fingerprint(step, finished)
        done = notes / f"{step.name}.json"
        if done.is_file() and json.loads(done.read_text(encoding="utf-8"))["fingerprint"] == current:
            log(f"{print_}: up to date")
            finished[step.name] = current
            continue
        started = notes / f"{step.name}.started"
        resumed = started.is_file() and started.read_text(encoding="utf-8") == current
        argv = list(step.argv) + prepared_folder(step, out / step.name, started, resumed)
        done.unlink(missing_ok=True)
        started.write_text(current, encoding="utf-8")
        log(f"{print_}: {'resumed' if resumed else 'running'}: {' '.join(argv[1:])}")
        began = time.perf_counter()
        result = subprocess.run(argv)
        if result.returncode != 0:
            raise ValueError(f"step {step.name} failed (exit {result.returncode}); its output is above. Rerun "
                               f"aayn pipeline {recipe_path} once it is mended: the steps done are kept")  # fmt: skip
        if step.then:
            step.then(out / step.name)
        seconds = round(time.perf_counter() - began, 1)
        done.write_text(json.dumps({"fingerprint": current, "seconds": seconds}) + "\n", encoding="utf-8")
        finished[step.name], ran[step.name] = current, seconds
    log(f"report: {out / 'report.md'}")
    return ran


def prepared_folder(step: Step, folder: Path, started: Path, resumed: bool) -> list[str]:
    """The step's folder made ready for its command (and the flags that say how): a trained step resumes from its
    newest complete checkpoint where a run with the same inputs was killed, else starts over; the bulk path keeps
    its finished shards on a resumed run; any other folder of this pipeline's is replaced whole. A folder there that
    this pipeline never began is refused."""
    if not folder.exists():
        return []
    if not started.is_file():
        raise FileExistsError(f"{folder} is there and this pipeline did not write it; move it away or choose another "
                              "output_dir")  # fmt: skip
    if step.trained:
        from ..training.output import complete_checkpoints

        if resumed and complete_checkpoints(str(folder))[0]:
            return ["--resume_from_checkpoint", "true"]
        return ["--overwrite_output_dir", "true"]
    if step.name == "back-translation" and resumed:
        return []
    shutil.rmtree(folder)
    return []


def write_corpus(name: str, src: str, tgt: str, output: str) -> None:
    """The corpus's train, validation and test splits as line-aligned files (any layout aayn train reads)."""
    from ..data import load_translation_dataset
    from ..folders import staged_folder

    data = load_translation_dataset(name, source_lang=src, target_lang=tgt)
    missing = [split for split in ("train", "validation", "test") if split not in data]
    if missing:
        raise ValueError(f"corpus {name} has no {missing[0]} split (the pipeline trains, chooses and scores on them)")
    with staged_folder(Path(output)) as staging:
        for split in ("train", "validation", "test"):
            rows = data[split]["translation"]
            for lang in (src, tgt):
                text = "".join(row[lang].replace("\n", " ") + "\n" for row in rows)
                (staging / f"{split}.{lang}").write_text(text, encoding="utf-8")


def evaluate_all(out: str, src: str, tgt: str, models: str, extra: list[str]) -> None:
    """Test BLEU / chrF, size and speed of each of `models` (comma-separated step names), by `aayn evaluate` in
    this process, into OUT/evaluation; then OUT/report.md and the chart it shows, OUT/report.svg."""
    import contextlib
    import io

    from ..folders import staged_file, staged_folder
    from ..translation import evaluation  # noqa: F401 (imported before the first model's clock starts)
    from . import main

    out = Path(out)
    rows = {}
    for name in models.split(","):
        folder = out / name
        argv = ["evaluate", "--model", str(folder), "--dataset_name", str(out / "clean"), "--source_lang", src,
                "--target_lang", tgt, *extra]  # fmt: skip
        printed, began = io.StringIO(), time.perf_counter()
        with contextlib.redirect_stdout(printed):
            if main(argv) != 0:
                raise ValueError(f"aayn {' '.join(argv)} failed; its error is above")
        seconds = time.perf_counter() - began
        scores = json.loads(printed.getvalue()[printed.getvalue().index("{") :])
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and "checkpoint-" not in str(p))
        rows[name] = {
            "bleu": round(scores["bleu"], 2),
            "chrf": round(scores["chrf"], 2),
            "megabytes": round(size / 1e6, 1),
            "sentences": scores["sentences"],  # those translated: --max_samples of the test split, or all of it
            "sentences_per_second": round(scores["sentences"] / seconds, 1),
        }
    with staged_folder(out / "evaluation") as staging:
        (staging / "scores.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    with staged_file(out / "report.svg") as partial:
        partial.write_text(chart(rows), encoding="utf-8")
    with staged_file(out / "report.md") as partial:
        partial.write_text(report(out, rows), encoding="utf-8")
    stated_against_teachers(out, rows)


AGAINST = "## Against its teachers"


def stated_against_teachers(out: Path, rows: dict) -> None:
    """The student's card and its int8 export's (README.md) state their test BLEU, chrF, size and speed beside
    those of the teachers that distilled them, as the evaluation measured them; a section an earlier evaluation
    wrote there is replaced."""
    from ..folders import staged_file

    teachers = [Path(name).name for name in json.loads((out / "distilled" / "report.json").read_text())["teachers"]]
    for name in ("student", "student-int8"):
        card = out / name / "README.md"
        if not card.is_file() or name not in rows:
            continue
        text = card.read_text(encoding="utf-8")
        if AGAINST in text:  # an earlier evaluation's: up to the next section, or the end
            before, _, after = text.partition("\n" + AGAINST)
            rest = after.split("\n## ", 1)
            text = before + ("\n## " + rest[1] if len(rest) > 1 else "\n")
        table = ["| model | test BLEU | chrF | size (MB) | sentences/s |", "|---|---|---|---|---|"]
        for model in [*teachers, name]:
            row, what = rows[model], "this model" if model == name else "teacher"
            table.append(f"| {model} ({what}) | {row['bleu']} | {row['chrf']} | {row['megabytes']} | "
                         f"{row['sentences_per_second']} |")  # fmt: skip
        said = (f"Measured by `aayn pipeline`'s evaluation on the test split of `{out / 'clean'}`, each model's "
                "whole `aayn evaluate` (its loading included) on the machine that ran it.")  # fmt: skip
        with staged_file(card) as partial:
            partial.write_text(text.rstrip("\n") + f"\n\n{AGAINST}\n\n{said}\n\n" + "\n".join(table) + "\n",
                               encoding="utf-8")  # fmt: skip


CHARTED = {"bleu": "test BLEU", "chrf": "test chrF", "megabytes": "size (MB)", "sentences_per_second": "sentences/s"}


def chart(rows: dict) -> str:
    """An SVG of four bar charts side by side (BLEU, chrF, size, speed), a bar per model, each chart scaled to its
    largest value: a picture any Markdown viewer shows, drawn without a plotting library."""
    width, bar, gap, label = 200, 18, 6, 130
    height = 40 + len(rows) * (bar + gap)
    size = f'width="{label + 4 * (width + 40)}" height="{height}"'
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" {size} font-family="sans-serif" font-size="12">']
    for i, name in enumerate(rows):
        y = 30 + i * (bar + gap)
        parts.append(f'<text x="4" y="{y + bar - 5}">{name}</text>')
    for j, (key, title) in enumerate(CHARTED.items()):
        x = label + j * (width + 40)
        parts.append(f'<text x="{x}" y="16" font-weight="bold">{title}</text>')
        top = max([row[key] for row in rows.values()] + [1e-9])
        for i, row in enumerate(rows.values()):
            y, length = 30 + i * (bar + gap), round(width * row[key] / top, 1)
            parts.append(f'<rect class="{key}" x="{x}" y="{y}" width="{length}" height="{bar}" fill="#4c78a8"/>')
            parts.append(f'<text x="{x + length + 3}" y="{y + bar - 5}">{row[key]:g}</text>')
    return "\n".join([*parts, "</svg>", ""])


def step_report(out: Path, step: str, counts: tuple[str, ...]) -> dict:
    """The step's report.json, with the counts the pipeline's report states: a report without one is an error
    naming the step (the report says what it knows, never "?")."""
    path = out / step / "report.json"
    read = json.loads(path.read_text(encoding="utf-8"))
    missing = [key for key in counts if not isinstance(read.get(key), int)]
    if missing:
        raise ValueError(f"step {step}: {path} has no count {missing[0]!r}; was it written by another aayn? Remove "
                         f"{out / NOTES / (step + '.json')} and run the pipeline again to redo the step")  # fmt: skip
    return read


def report(out: Path, rows: dict) -> str:
    """The run's report: the cleaning counts, and BLEU / chrF / size / speed per model with their chart."""
    lines = [f"# Pipeline report: {out}", ""]
    cleaned = step_report(out, "clean", ("pairs", "kept"))
    counts = cleaned.get("removed") or {}
    lines += ["## Cleaning", "", f"{cleaned['kept']} pairs kept of {cleaned['pairs']}.", ""]
    if counts:
        lines += ["| rule | pairs removed |", "|---|---|", *(f"| {rule} | {n} |" for rule, n in counts.items()), ""]
    if (out / "mixed" / "report.json").is_file():
        mixed = step_report(out, "mixed", ("synthetic_pairs", "real_pairs", "real_copies"))
        said = f"{mixed['synthetic_pairs']} synthetic pairs beside {mixed['real_pairs']} real ones"
        said += f" x {mixed['real_copies']}."
        lines += ["## Back-translation", "", said, ""]
    lines += ["## Models", "", "| model | test BLEU | chrF | size (MB) | sentences/s (whole evaluation) |",
              "|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| {name} | {row['bleu']} | {row['chrf']} | {row['megabytes']} | {row['sentences_per_second']} |"
              for name, row in rows.items()]  # fmt: skip
    lines += ["", "![BLEU, chrF, size and speed of each model](report.svg)", ""]
    sentences = next(iter(rows.values()))["sentences"]  # the same evaluation flags for every model
    said = (f"Speed counts each model's evaluation whole (its loading included) over the {sentences} test "
            "sentences it translated, on this machine.")  # fmt: skip
    lines += [said, ""]
    return "\n".join(lines)


def pipeline(args: argparse.Namespace) -> None:
    """Run every step of RECIPE that is missing or changed; then the report is OUTPUT/report.md."""
    ran = run_pipeline(args.recipe, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps({"ran": ran}))


def pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="a pipeline recipe (YAML: " + ", ".join(SECTIONS) + ")")


TRANSFORMERS = "itself"  # when transformers is set up (`aayn.cli.COMMANDS`): never here; each step's command does


run, arguments = pipeline, pipeline_arguments


if __name__ == "__main__":  # the pipeline's own two steps: the corpus written as files, and the evaluation
    from .arguments import report_user_errors

    own = {"--write_corpus": lambda: write_corpus(*sys.argv[2:6]),
           "--evaluate": lambda: evaluate_all(*sys.argv[2:6], sys.argv[6:])}  # fmt: skip
    sys.exit(report_user_errors("pipeline", own[sys.argv[1]], debug="--debug" in sys.argv))
