"""`aayn distill`: sequence-level knowledge distillation (Kim & Rush 2016): a teacher (one folder, or an ensemble)
translates a corpus's training sources with its search, and the sources paired with those translations (the
references too with `--with_references`) become a new corpus folder a smaller recipe trains on.

The translation is the bulk path's (`aayn.translation.bulk`): the sources cut into shards in a work folder beside
the output (`.distill-NAME`), each shard's translation written whole, so that a rerun after a kill translates only
the shards that are missing; the work folder goes once the corpus is whole. With `--ray` the shards are translated
by Ray actors, each opening the teacher (`aayn.translation.bulk_ray`, as `aayn translate --ray`: `--concurrency`,
`--num_cpus_per_worker`, `--num_gpus_per_worker`, `--ray_address` to join a cluster). `--translations DIR` takes
translations made elsewhere instead (`aayn translate --input CORPUS/train.SRC --output_dir DIR`)."""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
from pathlib import Path

from ..folders import REPORT
from .arguments import (
    check_actor_device,
    decoding_arguments,
    engine_options,
    generate_options,
    positive_int,
    prepare_transformers,
    ray_arguments,
)
from .mix import append_pairs, copy_held_out, count_lines, lines_of_shards, paired_shards, training_files

WORK = ".distill-"  # + the output's name: the source shards and their translations until the corpus is whole
MANIFEST = "work.json"  # what the work folder's shards were made from; another corpus, teacher or search: made anew


def distill(args: argparse.Namespace) -> None:
    """OUTPUT/train.SRC and train.TGT: each training source with the teacher's translation of it (and, with
    --with_references, every real pair after them); the corpus's validation and test files copied as they are (the
    student is chosen and scored on references); report.json names the teacher, its search and the counts."""
    from ..folders import replaceable, replaced_folder

    corpus, output = Path(args.corpus), Path(args.output)
    src, tgt = args.source_lang, args.target_lang
    real_files = training_files(corpus, (src, tgt), "--corpus")
    real_count = count_lines(real_files)
    replace = replaceable(output, args.overwrite, "aayn distill")
    work = output.with_name(WORK + output.name)
    on_ray = args.ray or args.ray_address
    if on_ray:
        check_actor_device(args.device, args.num_gpus_per_worker)
    if args.translations:
        if unused := [*generate_options(args), *(["ray"] if on_ray else [])]:
            raise ValueError(f"--translations {args.translations} are made already: --{unused[0]} would not be used "
                             "(give it to the aayn translate that makes them)")  # fmt: skip
        sources, translations = paired_shards(str(real_files[0]), args.translations)
        seconds = None
    else:
        sources, translations, seconds = teacher_translations(args, real_files[0], work)
    with replaced_folder(output, replace) as staging:
        names = [staging / f"train.{lang}" for lang in (src, tgt)]
        distilled = 0
        with names[0].open("w", encoding="utf-8") as source, names[1].open("w", encoding="utf-8") as target:
            for a, b in zip(*lines_of_shards(sources, translations)):
                if a.strip() and b.strip():  # a blank source or an empty translation trains nothing
                    source.write(a + "\n")
                    target.write(b + "\n")
                    distilled += 1
            if args.with_references:
                append_pairs(real_files, source, target)
        copy_held_out(corpus, staging, (src, tgt))
        search = None if args.translations else search_of(args) or "the teacher's own"  # None: made elsewhere
        report = {
            "written_by": "aayn distill", "corpus": str(corpus), "teachers": args.model,
            "teacher_results": [teacher_results(name) for name in args.model],
            "translations": args.translations or None, "search": search,
            "real_pairs": real_count, "distilled_pairs": distilled, "with_references": args.with_references,
            "teacher_seconds": seconds,
        }  # fmt: skip
        (staging / REPORT).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if not args.translations:
        shutil.rmtree(work)  # the corpus is whole: its shards are not needed again
    print(json.dumps(report))


def search_of(args: argparse.Namespace) -> dict:
    """The search flags given, as JSON holds them (sampling's settings a mapping)."""
    import dataclasses

    return {key: dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
            for key, value in generate_options(args).items()}  # fmt: skip


def teacher_translations(args: argparse.Namespace, sources: Path, work: Path) -> tuple[list, list, float]:
    """The training sources cut into shards of --shard_lines in `work`, and the teacher's translation of each
    shard (the bulk path: whole shards, the missing ones only); the seconds the teacher took in this run."""
    from ..languages import folder_language_tokens
    from ..translation.bulk import BulkSettings, translate_shards
    from ..translation.opening import open_translator
    from ..translation.targets import aimed, check_direction, language_prefix

    stat = sources.stat()
    made_from = {"sources": str(sources.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                 "teachers": [folder_state(name) for name in args.model],
                 "search": search_of(args), "shard_lines": args.shard_lines}  # fmt: skip
    made_from = json.loads(json.dumps(made_from))  # as the manifest reads back: lists, not tuples
    manifest = work / MANIFEST
    if work.exists() and not (manifest.is_file() and json.loads(manifest.read_text(encoding="utf-8")) == made_from):
        if not manifest.is_file():
            raise FileExistsError(f"{work} is there and aayn distill did not write it; move it away")
        shutil.rmtree(work)  # this command's own shards, of another corpus, teacher or search
    shards = work / "sources"
    if not shards.is_dir():
        write_shards(sources, shards, args.shard_lines)
        manifest.write_text(json.dumps(made_from, indent=2) + "\n", encoding="utf-8")
    multi_target = Path(args.model[0]).is_dir() and folder_language_tokens(args.model[0])  # its >>xx<< put first
    languages = (args.source_lang, args.target_lang) if multi_target else (None, None)
    settings = BulkSettings(work / "translations", batch_tokens=args.batch_tokens, generate=generate_options(args),
                            target_token=language_prefix(args.model, *languages))  # fmt: skip
    inputs = sorted(shards.iterdir())
    if args.ray or args.ray_address:  # each actor opens the teacher: the driver loads none
        from ..translation.bulk_ray import translate_shards_on_ray

        check_direction(args.model, *languages, None)
        done = translate_shards_on_ray(args.model, args.device, (), inputs, settings, address=args.ray_address,
                                       concurrency=args.concurrency, num_cpus=args.num_cpus_per_worker,
                                       num_gpus=args.num_gpus_per_worker, options=engine_options(args))  # fmt: skip
    else:
        setup = functools.partial(prepare_transformers, progress_bars=args.verbose)  # not for a CTranslate2 teacher
        translator = open_translator(args.model, args.device, (), setup=setup, options=engine_options(args))
        translator = aimed(translator, args.model, *languages)
        done = translate_shards(translator, inputs, settings, log=lambda line: print(line, file=sys.stderr))
    print(f"the teacher translated {done['lines']:,} sources in {done['seconds']} s ({done['already_done']} of "
          f"{done['shards']} shards done before)", file=sys.stderr)  # fmt: skip
    return inputs, [settings.output_dir / path.name for path in inputs], done["seconds"]


def folder_state(name: str) -> list:
    """A teacher as the work folder knows it: its path, and each file's name, size and time (a teacher trained
    again in the same folder is another teacher); a Hub id as it is."""
    folder = Path(name)
    if not folder.is_dir():
        return [name]
    files = sorted(path for path in folder.iterdir() if path.is_file())
    return [str(folder.resolve()), *[(path.name, path.stat().st_size, path.stat().st_mtime_ns) for path in files]]


def write_shards(sources: Path, folder: Path, lines_each: int) -> None:
    """`sources` cut into files of `lines_each` lines (00000.txt, 00001.txt, ...), the folder written whole."""
    from ..folders import staged_folder

    with staged_folder(folder) as staging, sources.open(encoding="utf-8") as lines:
        shard = None
        for count, line in enumerate(lines):
            if count % lines_each == 0:
                if shard:
                    shard.close()
                shard = (staging / f"{count // lines_each:05d}.txt").open("w", encoding="utf-8")
            shard.write(line if line.endswith("\n") else line + "\n")
        if shard:
            shard.close()


def teacher_results(name: str) -> dict | None:
    """A teacher folder's test scores as its card states them (Hub metadata), None where it states none."""
    from ..cards import front_matter

    for model in (front_matter(name) or {}).get("model-index") or []:
        for result in model.get("results") or []:
            scores = {metric["type"]: metric["value"] for metric in result.get("metrics") or []}
            if scores:
                return scores
    return None


def distill_arguments(parser: argparse.ArgumentParser) -> None:
    decoding_arguments(parser)  # --model: the teacher (repeat for an ensemble), and its search
    parser.add_argument("--source_lang", required=True)
    parser.add_argument("--target_lang", required=True)
    parser.add_argument("--corpus", required=True, help="a folder of line-aligned train.SRC / train.TGT (and the "
                        "validation and test files, copied)")  # fmt: skip
    parser.add_argument("--output", required=True, help="a new folder (or, with --overwrite, an earlier distill's)")
    parser.add_argument("--with_references", action="store_true", help="the real pairs too, after the distilled")
    parser.add_argument("--translations", metavar="DIR", help="the teacher's translations of CORPUS/train.SRC made "
                        "already (aayn translate --input ... --output_dir DIR); none: translated here")  # fmt: skip
    parser.add_argument("--shard_lines", type=positive_int, default=2000, help="sources per shard: what a kill "
                        "can cost (default: 2000)")  # fmt: skip
    ray_arguments(parser, "the teacher's shards translated by Ray actors (each opens the teacher)")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="model loading's progress bars")


TRANSFORMERS = "itself"  # when transformers is set up (`aayn.cli.COMMANDS`): not for a CTranslate2 teacher


run, arguments = distill, distill_arguments
