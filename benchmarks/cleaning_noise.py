"""Cleaning against synthetic noise: the demo's training split (the Bible's en-fr) with noise pairs added until they
are 30% of the corpus, five kinds in equal parts (misaligned pairs: another verse's target; untranslated copies:
the source as target; wrong-language targets: a verse of the Bible's German, Spanish or Italian; duplicates of
clean pairs; over-long pairs: 40 consecutive verses joined on each side), shuffled by a seed; then `aayn clean`
(with `--language`, and the dual cross-entropy filter where `--forward` / `--backward` are given). Printed: the
share of each kind of noise removed, the share of clean pairs removed, and the counts by rule.

    python benchmarks/cleaning_noise.py [--out runs/bench-cleaning] [--seed 0] [--no_language]
        [--forward FOLDER --backward FOLDER --max_dual_cross_entropy X]

It writes the noisy corpus as `noisy/train.en`, `noisy/train.fr` (with the Bible's validation and test splits
beside it, so `dataset_name: OUT/noisy` trains on it) and the cleaned one as `clean/`.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

KINDS = ("misaligned", "untranslated", "wrong_language", "duplicate", "over_long")
NOISE_SHARE = 0.3
REMOVED = "removed.jsonl"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench-cleaning"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no_language", action="store_true")
    parser.add_argument("--forward")
    parser.add_argument("--backward")
    parser.add_argument("--max_dual_cross_entropy", type=float)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    en_fr = bible("en", "fr")
    others = [t for lang in ("de", "es", "it") for _, t in bible("en", lang)["train"]]
    rows = noisy_corpus(en_fr["train"], others, rng)
    noisy = args.out / "noisy"
    write_split(noisy, "train", rows)
    for split in ("validation", "test"):
        write_split(noisy, split, en_fr[split])
    command = [sys.executable, "-m", "aayn.cli", "clean", "--source_lang", "en", "--target_lang", "fr", "--source",
               str(noisy / "train.en"), "--target", str(noisy / "train.fr"), "--output", str(args.out / "clean"),
               "--overwrite"]  # fmt: skip
    command += [] if args.no_language else ["--language"]
    if args.forward:
        command += ["--forward", args.forward, "--backward", args.backward]
        command += ["--max_dual_cross_entropy", str(args.max_dual_cross_entropy)]
    subprocess.run(command, check=True)
    removed = {json.loads(line)["line"] for line in (args.out / "clean" / REMOVED).open(encoding="utf-8")}
    kinds = Counter(kind for *_, kind in rows)
    caught = Counter(kind for line, (*_, kind) in enumerate(rows, start=1) if line in removed)
    report = json.loads((args.out / "clean" / "report.json").read_text())
    print(f"{len(rows):,} pairs, {sum(kinds[k] for k in KINDS):,} of them noise; cleaning took {report['seconds']} s")
    print("| kind | pairs | removed | share removed |")
    print("|---|---:|---:|---:|")
    for kind in ("clean", *KINDS):
        print(f"| {kind} | {kinds[kind]:,} | {caught[kind]:,} | {100 * caught[kind] / kinds[kind]:.1f}% |")
    noise = sum(kinds[k] for k in KINDS)
    print(f"| all noise | {noise:,} | {sum(caught[k] for k in KINDS):,} | "
          f"{100 * sum(caught[k] for k in KINDS) / noise:.1f}% |")  # fmt: skip
    print("by rule:", json.dumps(report["removed"]))
    rules = {row["line"]: row["rule"] for row in map(json.loads, (args.out / "clean" / REMOVED).open(encoding="utf-8"))}
    print(
        "clean pairs removed by rule:",
        json.dumps(
            Counter(rules[line] for line, (*_, kind) in enumerate(rows, start=1) if kind == "clean" and line in rules)
        ),
    )
    (args.out / "results.json").write_text(json.dumps({"kinds": kinds, "removed": caught, "report": report}) + "\n")


if __name__ == "__main__":
    main()
