"""`aayn clean`: a parallel corpus cleaned by rules, duplicates, language identification and, optionally, a forward
and a backward model (`aayn.data.cleaning`); what is kept, what is removed (and why) and a report, in a new folder."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from ..folders import REPORT
from .arguments import batch_tokens_argument, device_argument, positive_int

REMOVED = "removed.jsonl"  # one JSON object per removed pair: line, rule, source, target


def clean(args: argparse.Namespace) -> None:
    """Clean a parallel corpus: OUTPUT/SPLIT.SRC and SPLIT.TGT (the kept pairs, line-aligned: a corpus `aayn train`
    reads), removed.jsonl (each removed pair, its line and the rule that removed it), report.json and report.md."""
    from ..data.cleaning import CleaningRules

    rules = CleaningRules(
        args.source_lang, args.target_lang, max_words=args.max_words, max_ratio=args.max_ratio,
        max_word_chars=args.max_word_chars, max_foreign_letters=args.max_foreign_letters,
        numbers=not args.keep_number_mismatches, urls=not args.keep_url_mismatches,
        duplicates=not args.keep_duplicates, language=args.language,
        language_candidates=tuple(args.language_candidates),
        max_dual_cross_entropy=args.max_dual_cross_entropy, min_source_gain=args.min_source_gain,
    )  # fmt: skip
    limits = args.max_dual_cross_entropy is not None or args.min_source_gain is not None
    if (args.forward is None) != (args.backward is None) or (args.forward is not None) != limits:
        raise ValueError("the model filters take --forward and --backward with --max_dual_cross_entropy or "
                         "--min_source_gain (or both)")  # fmt: skip
    from ..folders import replaceable

    output = Path(args.output)
    replaced = replaceable(output, args.overwrite, "aayn clean")
    pairs = input_pairs(args)
    detector = language_detector(rules) if rules.language else None
    scorer = ModelScores(args) if args.forward else None
    write_cleaned(output, replaced, pairs, rules, detector, scorer, args)


def input_pairs(args: argparse.Namespace):
    """The pairs, streamed: two line-aligned files, or a split of a dataset the loader reads."""
    if args.dataset_name:
        if args.source or args.target:
            raise ValueError("give --dataset_name or --source and --target, not both")
        from ..data.loading import load_translation_dataset

        data = load_translation_dataset(args.dataset_name, args.dataset_config_name, source_lang=args.source_lang,
                                        target_lang=args.target_lang, splits={"train": args.split})  # fmt: skip
        return (
            (row[args.source_lang] or "", row[args.target_lang] or "")
            for batch in data["train"].iter(batch_size=10_000)
            for row in batch["translation"]
        )
    if not (args.source and args.target):
        raise ValueError("give --source and --target (line-aligned files), or --dataset_name")
    for path, flag in ((args.source, "--source"), (args.target, "--target")):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{flag} {path}: no such file")
    return aligned_lines(Path(args.source), Path(args.target))


def aligned_lines(source: Path, target: Path):
    """Line pairs of two UTF-8 files, read as they are used; ValueError naming the file and line that is not UTF-8,
    or the file that ends first."""
    from itertools import zip_longest

    with source.open("rb") as left, target.open("rb") as right:
        for number, (a, b) in enumerate(zip_longest(left, right), start=1):
            if a is None or b is None:
                ended, longer = (source, target) if a is None else (target, source)
                raise ValueError(f"{ended} ends at line {number - 1}, {longer} goes on: the files are not line-aligned")
            yield _line(a, source, number), _line(b, target, number)


def _line(data: bytes, path: Path, number: int) -> str:
    try:
        return data.decode("utf-8").rstrip("\n").rstrip("\r")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} line {number} is not UTF-8 text ({error.reason})") from None


def language_detector(rules):
    from functools import partial

    from ..translation.detect import Detector

    Detector(rules.candidates)  # a missing extra or an unknown code is said here, before any work
    return partial(Detector, rules.candidates)


class ModelScores:
    """Each pair's dual conditional cross-entropy, |H_f - H_b| + (H_f + H_b) / 2 (Junczys-Dowmunt 2018), and its
    source gain, ((H_f(y | x') - H_f(y | x)) + (H_b(x | y') - H_b(x | y))) / 2, where H is the per-token
    cross-entropy of --forward (f) and --backward (b) as `aayn score` computes log P (eos included) and (x', y') is
    the next pair of the batch (the last's: the first). The gain does not ask how well a pair reads but how much its
    own partner helps: a fluent, unusual pair reads badly beside any source, a misaligned one no better beside its
    own; with a single pair there is nothing to compare, so its gain is infinite (kept). The gain's two scorings
    run only where --min_source_gain asks for it."""

    def __init__(self, args: argparse.Namespace):
        from ..translation.opening import open_translator

        self.forward, self.backward = (
            open_translator([name], args.device, needs=("scores",)) for name in (args.forward, args.backward)
        )
        self.batch_tokens, self.gain = args.batch_tokens, args.min_source_gain is not None

    def entropies(self, translator, sources: list[str], targets: list[str]) -> list[float]:
        scored = translator.score(sources, targets, per_token=True, batch_tokens=self.batch_tokens)
        return [-pair.log_prob / max(1, len(pair.tokens)) for pair in scored]

    def __call__(self, sources: list[str], targets: list[str]) -> list[tuple[float, float]]:
        there, back = self.entropies(self.forward, sources, targets), self.entropies(self.backward, targets, sources)
        duals = [abs(f - b) + (f + b) / 2 for f, b in zip(there, back)]
        if not self.gain or len(sources) < 2:
            return [(dual, float("inf")) for dual in duals]
        other_sources, other_targets = sources[1:] + sources[:1], targets[1:] + targets[:1]
        there_other = self.entropies(self.forward, other_sources, targets)
        back_other = self.entropies(self.backward, other_targets, sources)
        gains = [((fo - f) + (bo - b)) / 2 for f, b, fo, bo in zip(there, back, there_other, back_other)]
        return list(zip(duals, gains))


def write_cleaned(output: Path, replaced: bool, pairs, rules, detector, scorer, args) -> None:
    """The kept and removed pairs and the report, written into a staging folder renamed to `output` at the end
    (a failure or a kill leaves `output` as it was)."""
    from ..checks import available_cores
    from ..data.cleaning import RULES, clean_pairs
    from ..folders import replaced_folder

    counts, started = Counter(), time.perf_counter()
    processes = args.processes or available_cores()
    with replaced_folder(output, replaced) as staging:
        names = [staging / f"{args.split_name}.{lang}" for lang in (args.source_lang, args.target_lang)]
        with (
            names[0].open("w", encoding="utf-8") as source,
            names[1].open("w", encoding="utf-8") as target,
            (staging / REMOVED).open("w", encoding="utf-8") as removed,
        ):
            for line, src, tgt, rule in clean_pairs(pairs, rules, detector=detector, model_scores=scorer,
                                                    processes=processes):  # fmt: skip
                counts[rule or "kept"] += 1
                if rule is None:
                    source.write(src + "\n")
                    target.write(tgt + "\n")
                else:
                    removed.write(json.dumps({"line": line, "rule": rule, "source": src, "target": tgt},
                                             ensure_ascii=False) + "\n")  # fmt: skip
                if line % 100_000 == 0:
                    print(f"aayn clean: {line:,} pairs, {counts['kept']:,} kept", file=sys.stderr)
        report = {
            "written_by": "aayn clean", "pairs": sum(counts.values()), "kept": counts["kept"],
            "removed": {rule: counts[rule] for rule in RULES if counts[rule]},
            "rules": {key: value for key, value in vars(rules).items()},
            "models": {"forward": args.forward, "backward": args.backward} if args.forward else None,
            "seconds": round(time.perf_counter() - started, 1),
        }  # fmt: skip
        (staging / REPORT).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (staging / "report.md").write_text(report_markdown(report), encoding="utf-8")
    print(json.dumps({key: report[key] for key in ("pairs", "kept", "removed")}))


def report_markdown(report: dict) -> str:
    total = max(1, report["pairs"])
    lines = [f"# Cleaning: {report['kept']:,} of {report['pairs']:,} pairs kept", "", "| rule | removed | share |",
             "|---|---:|---:|"]  # fmt: skip
    lines += [f"| {rule} | {count:,} | {100 * count / total:.2f}% |" for rule, count in report["removed"].items()]
    return "\n".join(lines) + "\n"


def clean_arguments(parser: argparse.ArgumentParser) -> None:
    from ..data.cleaning import CleaningRules

    defaults = CleaningRules("en", "fr")
    parser.add_argument("--source_lang", required=True)
    parser.add_argument("--target_lang", required=True)
    parser.add_argument("--source", help="the source side, one sentence per line")
    parser.add_argument("--target", help="the target side, line-aligned with --source")
    parser.add_argument("--dataset_name", help="instead: a dataset aayn train reads (a folder, a Hub id, bible)")
    parser.add_argument("--dataset_config_name")
    parser.add_argument("--split", default="train", help="with --dataset_name: the split expression read")
    parser.add_argument("--output", required=True, help="a new folder (or, with --overwrite, an earlier clean's)")
    parser.add_argument("--split_name", default="train", help="the kept files' name: SPLIT_NAME.SRC, SPLIT_NAME.TGT")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier aayn clean folder at --output")
    parser.add_argument("--max_words", type=positive_int, default=defaults.max_words)
    parser.add_argument("--max_ratio", type=float, default=defaults.max_ratio, help="longer side over shorter (chars)")
    parser.add_argument("--max_word_chars", type=positive_int, default=defaults.max_word_chars)
    parser.add_argument("--max_foreign_letters", type=float, default=defaults.max_foreign_letters,
                        help="share of a side's letters outside its language's scripts")  # fmt: skip
    parser.add_argument("--keep_number_mismatches", action="store_true")
    parser.add_argument("--keep_url_mismatches", action="store_true")
    parser.add_argument("--keep_duplicates", action="store_true")
    parser.add_argument("--language", action="store_true",
                        help="identify each side's language (pip install 'aayn[detect]'); a side not in its own "
                        "language, among the pair's and --language_candidates, is removed")  # fmt: skip
    parser.add_argument("--language_candidates", nargs="+", default=list(defaults.language_candidates))
    parser.add_argument("--forward", help="a SRC->TGT model folder for the dual cross-entropy filter")
    parser.add_argument("--backward", help="a TGT->SRC model folder for it")
    parser.add_argument("--max_dual_cross_entropy", type=float,
                        help="pairs scored above this (nats per token) are removed")  # fmt: skip
    parser.add_argument("--min_source_gain", type=float,
                        help="pairs whose own partner lowers the models' cross-entropy (nats per token) by less "
                        "than this against another pair's are removed")  # fmt: skip
    parser.add_argument("--processes", type=positive_int, help="worker processes (default: the cores available)")
    batch_tokens_argument(parser, "padded tokens per scoring batch")
    device_argument(parser)


TRANSFORMERS = "quiet"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = clean, clean_arguments
