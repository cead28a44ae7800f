"""Cleaning against synthetic noise: the demo's training split (the Bible's en-fr) with noise pairs added until they
are 30% of the corpus, five kinds in equal parts (misaligned pairs: another verse's target; untranslated copies:
the source as target; wrong-language targets: a verse of the Bible's German, Spanish or Italian; duplicates of
clean pairs; over-long pairs: 40 consecutive verses joined on each side), shuffled by a seed; then `aayn clean`
(with `--language`). Printed: the
share of each kind of noise removed, the share of clean pairs removed, and the counts by rule.

    python benchmarks/cleaning_noise.py [--out runs/bench-cleaning] [--seed 0] [--no_language]
        [--filter_steps 1500 [--quantile 0.98] [--gain_quantile 0.99]] [--bleu]

With `--filter_steps`, a forward and a backward model of the demo recipe's shape are trained that many steps on
what the rules kept (no clean data is given to them), the limit of the dual cross-entropy filter is the score that
`--quantile` of the held-out validation pairs stay under, and the noisy corpus is cleaned again with the filter;
then again with the source-gain filter too, its limit the gain that `--quantile` of the validation pairs stay above
(each beside the next validation pair, as `aayn clean` pairs them). The models are kept: a rerun with the same
`--out` trains none.

With `--bleu`, the demo recipe trains on the noisy corpus, on the last cleaned one and on the clean training split
alone (the same steps, batches and seed), and their test BLEU / chrF (the Bible's test split) are printed.

It writes the noisy corpus as `noisy/train.en`, `noisy/train.fr` (with the Bible's validation and test splits
beside it, so `dataset_name: OUT/noisy` trains on it) and the cleaned one as `clean/`.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

KINDS = ("misaligned", "untranslated", "wrong_language", "duplicate", "over_long")
NOISE_SHARE = 0.3
REMOVED = "removed.jsonl"
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml"


def bible(source: str, target: str):
    from aayn.data import load_translation_dataset

    data = load_translation_dataset("bible", source_lang=source, target_lang=target)
    return {split: [(row[source], row[target]) for row in data[split]["translation"]] for split in data}


def noisy_corpus(clean: list[tuple[str, str]], others: list[str], rng: random.Random) -> list[tuple[str, str, str]]:
    """The clean pairs (kind "clean") and the noise, shuffled: (source, target, kind)."""
    per_kind = round(NOISE_SHARE / (1 - NOISE_SHARE) * len(clean) / len(KINDS))
    rows = [(s, t, "clean") for s, t in dict.fromkeys(clean)]  # the Bible's own repeated verses once
    copies = []
    for _ in range(per_kind):
        i, j = rng.randrange(len(clean)), rng.randrange(len(clean))
        rows.append((clean[i][0], clean[j][1] if j != i else clean[(j + 1) % len(clean)][1], "misaligned"))
        rows.append((clean[i][0], clean[i][0], "untranslated"))
        rows.append((clean[i][0], rng.choice(others), "wrong_language"))
        copies.append(clean[j])
        start = rng.randrange(len(clean) - 40)
        block = clean[start : start + 40]
        rows.append((" ".join(s for s, _ in block), " ".join(t for _, t in block), "over_long"))
    rng.shuffle(rows)
    where = {(s, t): i for i, (s, t, kind) in enumerate(rows) if kind == "clean"}
    # a copy comes after its original (which of two equal pairs is the noise is the later one)
    for at in sorted((rng.randint(where[pair] + 1, len(rows)), pair) for pair in copies)[::-1]:
        rows.insert(at[0], (*at[1], "duplicate"))
    return rows


def write_split(folder: Path, split: str, pairs) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.en").write_text("".join(s + "\n" for s, *_ in pairs), encoding="utf-8")
    (folder / f"{split}.fr").write_text("".join(t + "\n" for _, t, *_ in pairs), encoding="utf-8")


def clean(noisy: Path, output: Path, language: bool, models: tuple[str, str] | None = None, limit=None,
          gain=None) -> None:  # fmt: skip
    command = [sys.executable, "-m", "aayn.cli", "clean", "--source_lang", "en", "--target_lang", "fr", "--source",
               str(noisy / "train.en"), "--target", str(noisy / "train.fr"), "--output", str(output),
               "--overwrite"]  # fmt: skip
    command += ["--language"] * language
    if models:
        command += ["--forward", models[0], "--backward", models[1], "--max_dual_cross_entropy", str(limit)]
    if gain is not None:
        command += ["--min_source_gain", str(gain)]
    subprocess.run(command, check=True)


def filter_models(out: Path, kept: Path, noisy: Path, steps: int) -> tuple[str, str]:
    """A forward and a backward model of the demo recipe's shape trained `steps` steps on what the rules kept."""
    corpus = out / "rules-kept"
    corpus.mkdir(parents=True, exist_ok=True)
    for split in ("train", "validation", "test"):
        for lang in ("en", "fr"):
            shutil.copy((kept if split == "train" else noisy) / f"{split}.{lang}", corpus / f"{split}.{lang}")
    folders = []
    for source, target in (("en", "fr"), ("fr", "en")):
        folder = out / f"filter-{source}-{target}"
        folders.append(str(folder))
        if (folder / "config.json").is_file():
            continue
        subprocess.run([sys.executable, "-m", "aayn.train", str(RECIPE), "--dataset_name", str(corpus), "--source_lang",
                        source, "--target_lang", target, "--output_dir", str(folder), "--max_steps", str(steps),
                        "--eval_strategy", "no", "--save_strategy", "no", "--do_predict", "false",
                        "--average_last_checkpoints", "0", "--overwrite_output_dir", "true", "--report_to", "none"],
                       check=True)  # fmt: skip
    return folders[0], folders[1]


def validation_limits(models: tuple[str, str], noisy: Path, quantile: float, gain_quantile: float):
    """The dual cross-entropy that `quantile` of the (clean, held-out) validation pairs stay under, and the source
    gain that `gain_quantile` of them stay above."""

    def entropies(model, source, target):
        printed = subprocess.run([sys.executable, "-m", "aayn.cli", "score", "--model", model, "--source", str(source),
                                  "--target", str(target), "--per_token"], check=True, capture_output=True,
                                 text=True).stdout  # fmt: skip
        return [-float(line.split("\t")[0]) / len(line.split("\t")[2].split()) for line in printed.splitlines()]

    en, fr = noisy / "validation.en", noisy / "validation.fr"
    forward, backward = entropies(models[0], en, fr), entropies(models[1], fr, en)
    scores = sorted(abs(a - b) + (a + b) / 2 for a, b in zip(forward, backward))
    shifted = {}
    for lang in ("en", "fr"):
        lines = (noisy / f"validation.{lang}").read_text(encoding="utf-8").splitlines()
        shifted[lang] = noisy.parent / f"validation-next.{lang}"
        shifted[lang].write_text("".join(line + "\n" for line in lines[1:] + lines[:1]), encoding="utf-8")
    forward_other, backward_other = entropies(models[0], shifted["en"], fr), entropies(models[1], shifted["fr"], en)
    gains = sorted(((fo - f) + (bo - b)) / 2 for f, b, fo, bo in zip(forward, backward, forward_other, backward_other))
    return scores[min(len(scores) - 1, int(quantile * len(scores)))], gains[int((1 - gain_quantile) * len(gains))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench-cleaning"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no_language", action="store_true")
    parser.add_argument("--filter_steps", type=int, default=0, help="train the cross-entropy filter's two models")
    parser.add_argument("--quantile", type=float, default=0.98, help="of validation scores: the filter's limit")
    parser.add_argument("--gain_quantile", type=float, default=0.99, help="of validation gains kept above the limit")
    parser.add_argument("--bleu", action="store_true", help="train the demo recipe on noisy, cleaned and clean data")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    en_fr = bible("en", "fr")
    others = [t for lang in ("de", "es", "it") for _, t in bible("en", lang)["train"]]
    rows = noisy_corpus(en_fr["train"], others, rng)
    noisy = args.out / "noisy"
    write_split(noisy, "train", rows)
    for split in ("validation", "test"):
        write_split(noisy, split, en_fr[split])
    clean(noisy, args.out / "clean", not args.no_language)
    summary(rows, args.out / "clean")
    if args.filter_steps:
        models = filter_models(args.out, args.out / "clean", noisy, args.filter_steps)
        limit, gain = validation_limits(models, noisy, args.quantile, args.gain_quantile)
        print(f"dual cross-entropy limit {limit:.3f} (the validation pairs' {args.quantile:.0%} quantile), source "
              f"gain limit {gain:.3f} ({args.gain_quantile:.0%} of them above)")  # fmt: skip
        clean(noisy, args.out / "clean-filtered", not args.no_language, models, limit)
        summary(rows, args.out / "clean-filtered")
        clean(noisy, args.out / "clean-gain", not args.no_language, models, limit, gain)
        summary(rows, args.out / "clean-gain")
    if args.bleu:
        cleaned = args.out / ("clean-gain" if args.filter_steps else "clean")
        write_split(args.out / "original", "train", en_fr["train"])
        for folder in (cleaned, args.out / "original"):
            for split in ("validation", "test"):
                write_split(folder, split, en_fr[split])
        scores = {
            name: demo_bleu(folder, args.out / f"demo-{name}")
            for name, folder in (("noisy", noisy), ("cleaned", cleaned), ("clean", args.out / "original"))
        }
        print("| training data | test BLEU | test chrF |\n|---|---|---|")
        for name, row in scores.items():
            print(f"| {name} | {row['test_bleu']:.2f} | {row['test_chrf']:.2f} |")
        (args.out / "results-bleu.json").write_text(json.dumps(scores, indent=2) + "\n")


def demo_bleu(corpus: Path, output: Path) -> dict:
    """The demo recipe trained on `corpus` (its train, validation and test files): its test_results.json."""
    if not (output / "test_results.json").is_file():
        subprocess.run([sys.executable, "-m", "aayn.train", str(RECIPE), "--dataset_name", str(corpus), "--output_dir",
                        str(output), "--overwrite_output_dir", "true", "--report_to", "none"], check=True)  # fmt: skip
    return json.loads((output / "test_results.json").read_text())


def summary(rows, folder: Path) -> None:
    removed = {json.loads(line)["line"]: json.loads(line)["rule"] for line in (folder / REMOVED).open(encoding="utf-8")}
    kinds = Counter(kind for *_, kind in rows)
    caught = Counter(kind for line, (*_, kind) in enumerate(rows, start=1) if line in removed)
    report = json.loads((folder / "report.json").read_text())
    noise = sum(kinds[k] for k in KINDS)
    print(f"{folder.name}: {len(rows):,} pairs, {noise:,} of them noise; cleaning took {report['seconds']} s")
    print("| kind | pairs | removed | share removed |")
    print("|---|---:|---:|---:|")
    for kind in ("clean", *KINDS):
        print(f"| {kind} | {kinds[kind]:,} | {caught[kind]:,} | {100 * caught[kind] / kinds[kind]:.1f}% |")
    print(f"| all noise | {noise:,} | {sum(caught[k] for k in KINDS):,} | "
          f"{100 * sum(caught[k] for k in KINDS) / noise:.1f}% |")  # fmt: skip
    print("by rule:", json.dumps(report["removed"]))
    clean_rules = Counter(removed[line] for line, (*_, kind) in enumerate(rows, start=1)
                          if kind == "clean" and line in removed)  # fmt: skip
    print("clean pairs removed by rule:", json.dumps(clean_rules))
    (folder.parent / f"results-{folder.name}.json").write_text(
        json.dumps({"kinds": kinds, "removed": caught, "clean_removed_by_rule": clean_rules, "report": report}) + "\n"
    )


if __name__ == "__main__":
    main()
