"""`aayn mix`: back-translated pairs (a reverse model's `aayn translate --input` of target-side monolingual text)
beside the real pairs, noised and tagged, at a stated ratio (`aayn.data.synthetic`), in a new corpus folder."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from ..folders import REPORT


def mix(args: argparse.Namespace) -> None:
    """Mix back-translations with real pairs: OUTPUT/train.SRC and train.TGT hold the real pairs (repeated to keep
    --ratio synthetic pairs per real one) and every synthetic pair (its source noised with --noise and tagged with
    --tag), the real folder's validation and test files copied; report.json says what went in."""
    from ..data.synthetic import real_copies, synthetic_pairs
    from ..folders import replaceable, replaced_folder

    real = Path(args.real)
    src, tgt = args.source_lang, args.target_lang
    real_files = training_files(real, (src, tgt), "--real")
    sides = [paired_shards(args.synthetic_source, args.synthetic_target)]
    output = Path(args.output)
    replace = replaceable(output, args.overwrite, "aayn mix")
    real_count = count_lines(real_files)
    with replaced_folder(output, replace) as staging:
        names = [staging / f"train.{lang}" for lang in (src, tgt)]
        with names[0].open("w", encoding="utf-8") as source, names[1].open("w", encoding="utf-8") as target:
            synthetic = 0
            for pair in synthetic_pairs(*lines_of_shards(*sides[0]), tag=args.tag, noise=args.noise, seed=args.seed):
                source.write(pair[0] + "\n")
                target.write(pair[1] + "\n")
                synthetic += 1
            copies = real_copies(real_count, synthetic, args.ratio)
            for _ in range(copies):
                append_pairs(real_files, source, target)
        copy_held_out(real, staging, (src, tgt))
        report = {
            "written_by": "aayn mix", "real": str(real), "real_pairs": real_count, "real_copies": copies,
            "synthetic_pairs": synthetic, "ratio_asked": args.ratio,
            "ratio": round(synthetic / (copies * real_count), 4),
            "tag": args.tag, "noise": args.noise, "seed": args.seed,
        }  # fmt: skip
        (staging / REPORT).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(report))


def training_files(corpus: Path, langs: tuple[str, str], option: str) -> list[Path]:
    """`corpus`'s train.SRC and train.TGT, or the error naming the one missing."""
    files = [corpus / f"train.{lang}" for lang in langs]
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"{option} {corpus}: no {path.name} (a folder of line-aligned files, as aayn "
                                    "clean writes)")  # fmt: skip
    return files


def append_pairs(files: list[Path], source, target) -> None:
    """The line-aligned pairs of `files` written to the open `source` and `target`, a line end after each."""
    with files[0].open(encoding="utf-8") as left, files[1].open(encoding="utf-8") as right:
        for a, b in zip(left, right):
            source.write(a if a.endswith("\n") else a + "\n")
            target.write(b if b.endswith("\n") else b + "\n")


def copy_held_out(corpus: Path, folder: Path, langs: tuple[str, str]) -> None:
    """The validation and test files `corpus` has, copied into `folder` as they are (models are chosen and scored
    on real pairs whatever they were trained on)."""
    for split in ("validation", "test"):
        for lang in langs:
            if (corpus / f"{split}.{lang}").is_file():
                shutil.copy(corpus / f"{split}.{lang}", folder / f"{split}.{lang}")


def paired_shards(sources: str, targets: str) -> tuple[list[Path], list[Path]]:
    """The synthetic sources' shards and the monolingual targets' they were translated from, paired by name (the
    bulk path gives each output shard its input's name); one file each is one shard."""
    from ..translation.bulk import shards_of

    left, right = shards_of(sources), shards_of(targets)
    if [path.name for path in left] != [path.name for path in right] and not (len(left) == len(right) == 1):
        names = [[p.name for p in side][:5] for side in (left, right)]
        raise ValueError(f"--synthetic_source holds shards {names[0]}, --synthetic_target {names[1]}: each "
                         "translation's shard must have its input's name")  # fmt: skip
    for path in (*left, *right):
        if path.suffix in (".jsonl", ".parquet"):
            raise ValueError(f"{path}: aayn mix reads text shards (one sentence a line)")
    return left, right


def lines_of_shards(sources: list[Path], targets: list[Path]):
    """Both sides' lines, shard after shard; ValueError naming a shard whose two sides differ in length."""

    def side(paths, other):
        for path, partner in zip(paths, other):
            with path.open(encoding="utf-8") as lines, partner.open(encoding="utf-8") as partner_lines:
                count = sum(1 for _ in partner_lines)
                seen = 0
                for line in lines:
                    seen += 1
                    yield line.rstrip("\n")
                if seen != count:
                    raise ValueError(f"{path} has {seen:,} lines, {partner} {count:,}: not a translation of it")

    return side(sources, targets), side(targets, sources)


def count_lines(files: list[Path]) -> int:
    counts = [sum(1 for _ in path.open(encoding="utf-8")) for path in files]
    if counts[0] != counts[1]:
        raise ValueError(f"{files[0]} has {counts[0]:,} lines, {files[1]} {counts[1]:,}: not line-aligned")
    return counts[0]


def mix_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source_lang", required=True)
    parser.add_argument("--target_lang", required=True)
    parser.add_argument("--real", required=True, help="a folder of line-aligned train.SRC / train.TGT (aayn clean's)")
    parser.add_argument("--synthetic_source", required=True,
                        help="a reverse model's translations: aayn translate --input MONO --output_dir IT")  # fmt: skip
    parser.add_argument("--synthetic_target", required=True, help="the monolingual target text it translated (MONO)")
    parser.add_argument("--output", required=True, help="a new folder (or, with --overwrite, an earlier mix's)")
    parser.add_argument("--ratio", type=float, default=1.0, help="synthetic pairs per real one (real ones repeated)")
    parser.add_argument("--tag", default="<BT>", help="put before each synthetic source ('' for none)")
    parser.add_argument("--noise", action="store_true", help="Edunov et al.'s noise on the synthetic sources")
    parser.add_argument("--seed", type=int, default=1, help="the noise's draws")
    parser.add_argument("--overwrite", action="store_true")


TRANSFORMERS = "quiet"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = mix, mix_arguments
