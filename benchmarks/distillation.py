"""Sequence-level distillation on the Bible's en-fr (the demo's data): the demo model as teacher, its beam
translations of every training source (`aayn distill`), and a student of half its width (d_model 64, feed-forward
256, the demo's layers, heads, steps, batches and seed) trained once on the references and once on the distilled
corpus. Printed as JSON and a Markdown table: test BLEU / chrF of the teacher and of both students, by beam 4 (the
recipe's search) and greedy; then the distilled student exported int8 through CTranslate2, and the sentences a
second each arm decodes on the test split (the teacher's torch beam 4, the student's int8 beam 4 and greedy),
arms alternating in rounds, one process, all cores.

    python benchmarks/distillation.py [--out runs/bench-distill] [--teacher FOLDER] [--rounds 3] [--seeds 1 2 3]

Without `--teacher`, the teacher is trained first by the demo recipe (about 15 minutes on 2 cores). Each step's
folder is kept under OUT and not redone on a rerun; the speed rounds run each time (`--rounds 0`: none). With
`--seeds`, both students are trained once per seed (the teacher and its distilled corpus are one, seed 1), and the
table gives each seed's scores, then their mean and range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml"
STUDENT = ["--d_model", "64", "--ffn_dim", "256"]  # half the demo's width; its layers, heads and steps


def aayn(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "aayn.cli", *args], check=True, stdout=subprocess.PIPE,
                          text=True).stdout  # fmt: skip


def train(output: Path, *flags: str) -> Path:
    if not (output / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "aayn.train", str(RECIPE), "--output_dir", str(output),
                        "--report_to", "none", *flags], check=True)  # fmt: skip
    return output


def write_corpus(folder: Path) -> Path:
    """The demo's splits (the Bible's en-fr) as line-aligned files, the layout aayn distill and aayn train read."""
    from aayn.data import load_translation_dataset

    if (folder / "test.fr").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    data = load_translation_dataset("bible", source_lang="en", target_lang="fr")
    for split in ("train", "validation", "test"):
        for lang in ("en", "fr"):
            lines = [row[lang] for row in data[split]["translation"]]
            (folder / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return folder


def scores(model: Path, corpus: Path, *search: str) -> dict:
    printed = aayn("evaluate", "--model", str(model), "--dataset_name", str(corpus), "--source_lang", "en",
                   "--target_lang", "fr", *search)  # fmt: skip
    result = json.loads(printed[printed.index("{") :])
    return {"bleu": round(result["bleu"], 2), "chrf": round(result["chrf"], 2)}


def speeds(arms: dict, texts: list[str], rounds: int) -> dict:
    """Sentences a second of each arm on `texts` (one call each, the default batching), arms alternating."""
    from aayn.translation.opening import open_translator

    opened = {name: (open_translator([str(folder)], "cpu"), search) for name, (folder, search) in arms.items()}
    for translator, search in opened.values():
        translator.nbest(texts[:32], 1, **search)  # warm: first calls allocate
    seen = {name: [] for name in arms}
    for _ in range(rounds):
        for name, (translator, search) in opened.items():
            start = time.perf_counter()
            translator.nbest(texts, 1, **search)
            seen[name].append(len(texts) / (time.perf_counter() - start))
    return {name: {"median": round(statistics.median(runs), 1), "runs": [round(r, 1) for r in runs]}
            for name, runs in seen.items()}  # fmt: skip


def over_seeds(quality: dict) -> dict:
    """Each student's mean over its seeds, with the range (lowest-highest), per search and metric."""
    rows = {}
    for kind in ("references", "distilled"):
        seeded = [by for name, by in quality.items() if name.startswith(f"student, {kind}, seed")]
        rows[f"student, {kind}, mean (range) of {len(seeded)} seeds"] = {
            search: {metric: f"{statistics.mean(by[search][metric] for by in seeded):.2f} "
                             f"({min(by[search][metric] for by in seeded):.2f}-"
                             f"{max(by[search][metric] for by in seeded):.2f})" for metric in ("bleu", "chrf")}
            for search in ("beam 4", "greedy")
        }  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench-distill")
    parser.add_argument("--teacher", help="a trained demo folder (default: train one under OUT)")
    parser.add_argument("--rounds", type=int, default=3, help="speed rounds (0: none)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="the students' seeds")
    args = parser.parse_args()
    out = Path(args.out)
    corpus = write_corpus(out / "corpus")
    teacher = Path(args.teacher) if args.teacher else train(out / "teacher")
    distilled = out / "distilled"
    if not (distilled / "report.json").is_file():
        started = time.perf_counter()
        aayn("distill", "--model", str(teacher), "--source_lang", "en", "--target_lang", "fr", "--corpus", str(corpus),
             "--output", str(distilled))  # fmt: skip
        print(f"distilled corpus in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    students = {}
    for seed in args.seeds:
        suffix = "" if seed == 1 else f"-seed{seed}"  # seed 1's folders keep the names they had before seeds
        named = "" if args.seeds == [1] else f", seed {seed}"
        students[f"student, references{named}"] = train(out / f"student-references{suffix}", "--dataset_name",
                                                        str(corpus), "--seed", str(seed), *STUDENT)  # fmt: skip
        students[f"student, distilled{named}"] = train(out / f"student-distilled{suffix}", "--dataset_name",
                                                       str(distilled), "--seed", str(seed), *STUDENT)  # fmt: skip
    quality = {"teacher": {"beam 4": scores(teacher, corpus), "greedy": scores(teacher, corpus, "--num_beams", "1")}}
    for name, folder in students.items():
        quality[name] = {"beam 4": scores(folder, corpus), "greedy": scores(folder, corpus, "--num_beams", "1")}
    if len(args.seeds) > 1:
        quality |= over_seeds(quality)
    texts = (corpus / "test.en").read_text(encoding="utf-8").splitlines()
    speed = {}
    if args.rounds:
        int8 = out / "student-distilled-int8"
        if not (int8 / "model.bin").is_file():
            aayn("export", "--model", str(out / "student-distilled"), "--format", "ctranslate2", "--output_dir",
                 str(int8), "--quantization", "int8")  # fmt: skip
        arms = {
            "teacher, torch, beam 4": (teacher, {}),
            "student int8 CTranslate2, beam 4": (int8, {}),
            "student int8 CTranslate2, greedy": (int8, {"num_beams": 1}),
        }
        speed = speeds(arms, texts, args.rounds)
    parameters = {name: json.loads((folder / "config.json").read_text())["d_model"]
                  for name, folder in {"teacher": teacher, **students}.items()}  # fmt: skip
    print(json.dumps({"quality": quality, "d_model": parameters, "sentences_per_second": speed,
                      "test_sentences": len(texts)}, indent=2))  # fmt: skip
    print("\n| model | test BLEU, beam 4 | chrF | BLEU, greedy | chrF |\n|---|---|---|---|---|")
    for name, by in quality.items():
        print(f"| {name} | {by['beam 4']['bleu']} | {by['beam 4']['chrf']} | {by['greedy']['bleu']} | "
              f"{by['greedy']['chrf']} |")  # fmt: skip
    print(f"\n| decoding {len(texts)} test verses | sentences/s, median | rounds |\n|---|---|---|")
    for name, measured in speed.items():
        print(f"| {name} | {measured['median']} | {measured['runs']} |")


if __name__ == "__main__":
    main()
