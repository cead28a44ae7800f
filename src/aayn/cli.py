"""The `aayn` command."""

import argparse
import functools
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .common import MissingExtra
from .registration import register, register_later
from .translation.translator import DECODING_BATCH_TOKENS, TextError


def copy_task(args: argparse.Namespace) -> None:
    """Train a tiny AAYN on the copy task, check it by greedy decoding, save it and load it back."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from .copy_task import copy_batch, copy_exact_match, train_copy_task

    start = time.perf_counter()
    model = train_copy_task(steps=args.steps, seed=args.seed)
    print(f"trained {args.steps} steps in {time.perf_counter() - start:.1f}s")
    print(f"exact match of greedy copies on 200 fresh sequences: {copy_exact_match(model):.1%}")
    model.save_pretrained(args.output_dir)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(args.output_dir)
    examples = copy_batch(3, 10, model.config.vocab_size, torch.Generator().manual_seed(args.seed + 1))
    for source, output in zip(examples, loaded.generate(examples, max_new_tokens=11, do_sample=False)):
        print(f"  {source[:-1].tolist()} -> {output[1:-1].tolist()}")
    print(f"saved to {args.output_dir} (weights, config with auto_map, code); reloaded with AutoModelForSeq2SeqLM")


def train(args: argparse.Namespace) -> None:
    """Train a translation model from a YAML recipe (see recipes/); flags after the recipe override it."""
    from .training.arguments import parse_arguments

    arguments = parse_arguments(args.recipe_and_flags)  # `aayn train --help` lists every key
    register()
    from .training.job import run  # datasets, evaluate, ...: only once the arguments are known to be good

    run(*arguments)


def preprocess(args: argparse.Namespace) -> None:
    """Prepare a recipe's data once, as fairseq-preprocess does: the BPE and every split's token ids, in a folder
    under datasets' cache that `aayn train` with the same data and settings finds by itself (same keys as train)."""
    from .training.arguments import parse_arguments

    arguments = parse_arguments(args.recipe_and_flags)
    register()
    from .training.job import prepare
    from .training.plan import plan_run

    prepared = prepare(plan_run(*arguments))
    size = sum(path.stat().st_size for path in prepared.folder.rglob("*") if path.is_file())
    splits = ", ".join(f"{split} {len(rows):,} pairs" for split, rows in prepared.splits.items())
    print(f"prepared {splits} ({size / 1e6:,.1f} MB) in {prepared.folder}")


def average(args: argparse.Namespace) -> None:
    """Average the weights of checkpoints into a complete, hub-ready model folder (§6.1)."""
    from .training.average import average_checkpoints

    print(f"wrote {average_checkpoints(args.checkpoints, args.output_dir)}")


def evaluate(args: argparse.Namespace) -> None:
    """Print BLEU, chrF (sacreBLEU) and their signatures for a saved model on a dataset split, as JSON."""
    import json

    from .checks import check_device, check_direction
    from .translation.evaluation import evaluate_model
    from .translation.opening import locate_model

    check_device(args.device)
    if len(args.model) != 1:
        raise ValueError(f"aayn evaluate scores one model; got {len(args.model)} --model (ensembles: aayn translate)")
    folder = locate_model(args.model[0])  # its kind decided here, once
    check_direction(folder.location, args.source_lang, args.target_lang, insist=args.any_direction)
    scores = evaluate_model(
        folder,
        args.dataset_name,
        dataset_config_name=args.dataset_config_name,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        split=args.split,
        max_samples=args.max_samples,
        batch_tokens=args.batch_tokens,
        device=args.device,
        output=args.output,
        **generate_options(args),
    )
    print(json.dumps(scores, indent=2))


def _decoded(data: bytes, where: str, first_line: int = 1) -> list[str]:
    """UTF-8 lines of `data` without their ends (decoded here: a C or surrogateescape locale would let undecodable
    bytes through), or ValueError naming the line (`first_line`: the number of the first line of `data`)."""
    try:
        return [line.rstrip("\r") for line in data.decode("utf-8").split("\n")]
    except UnicodeDecodeError as error:
        line = first_line + data.count(b"\n", 0, error.start)
        column = error.start - data.rfind(b"\n", 0, error.start)
        raise ValueError(f"{where} line {line} is not UTF-8 text ({error.reason} at byte {column})") from None


def input_batches(stream, buffer_size: int | None):
    """The lines of a binary stream, in batches as they arrive, the way fairseq-interactive reads: a batch is every
    whole line there is to read without waiting (at most `buffer_size`), so a terminal or a pipe fed line by line
    gets each answer at once, and a file or a fast pipe is translated in large, length-sorted batches."""
    import os
    import select

    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file descriptor (an in-memory stream): all at once
        lines = _decoded(stream.read(), "standard input")
        yield lines[:-1] if lines and lines[-1] == "" else lines
        return
    pending, ended, seen = b"", False, 0  # lines read so far

    def read_more() -> None:
        nonlocal pending, ended
        chunk = os.read(fd, 1 << 16)
        pending, ended = pending + chunk, not chunk

    while True:
        while b"\n" not in pending and not ended:  # wait for one whole line
            read_more()
        while not ended and select.select([fd], [], [], 0)[0]:  # and take whatever else is there already
            if buffer_size is not None and pending.count(b"\n") >= buffer_size:
                break
            read_more()
        if ended and not pending:
            return
        whole, _, pending = pending.rpartition(b"\n") if not ended else (pending.removesuffix(b"\n"), b"", b"")
        lines = _decoded(whole, "standard input", seen + 1)
        seen += len(lines)
        step = buffer_size or len(lines)
        for start in range(0, len(lines), step):
            yield lines[start : start + step]


def translate(args: argparse.Namespace) -> None:
    """Translate the given sentences, or standard input as its lines arrive, to standard output (one line per
    line, flushed after each batch)."""
    from .translation.opening import open_translator, translator_format

    check_translate_arguments(args)
    if args.text or args.file or args.input:
        batches = [args.text]
    elif args.show_attention:
        batches = list(input_batches(sys.stdin.buffer, None))
    else:
        batches = input_batches(sys.stdin.buffer, args.buffer_size)  # read as the model answers
    if args.show_attention:
        lines = [line for batch in batches for line in batch]
        if len(lines) != 1:
            raise ValueError(f"--show_attention draws one sentence; got {len(lines)} lines")
    generate = generate_options(args)
    if args.glossary:
        from .model.glossary_aayn import Glossary

        if args.show_attention:
            raise ValueError("--show_attention draws one plain translation: no --glossary with it")
        if not Path(args.glossary).is_file():
            raise FileNotFoundError(f"--glossary {args.glossary}: no such file")
        generate["glossary"] = Glossary.read(args.glossary)
    if args.print_alignment:
        from .translation.alignment import AlignmentSettings

        if args.show_attention:
            generate["alignment_settings"] = AlignmentSettings(args.alignment_layer, args.alignment_heads)
        else:
            generate["alignment"] = AlignmentSettings(args.alignment_layer, args.alignment_heads)
    needs = ("prefixes",) * bool(args.prefix) + ("attention",) * bool(args.show_attention)
    needs += ("glossary",) * bool(args.glossary) + ("alignment",) * bool(args.print_alignment)
    if args.input and (args.ray or args.ray_address):  # each actor opens its own: the driver loads no model
        entry, _ = translator_format(args.model, needs)  # the folders and what they can do, before Ray starts
        if args.device not in entry.devices:
            raise ValueError(f"--device {args.device}: aayn runs {entry.title} folders on {' or '.join(entry.devices)}")
        return translate_corpus(None, args, generate)
    setup = functools.partial(prepare_transformers, progress_bars=args.verbose)  # not for a CTranslate2 folder
    translator = open_translator(args.model, args.device, needs, setup=setup)
    if args.show_attention:
        drawn = generate.pop("alignment_settings", None)
        settings = translator.settings(**generate)
        text = translator.plot_cross_attention(
            lines[0], args.show_attention, per_head=args.per_head, settings=settings, alignment=drawn
        )
        print(text)
        print(f"cross-attention drawn to {args.show_attention}", file=sys.stderr)
        return
    if args.file:
        return translate_file(translator, args, generate)
    if args.input:
        return translate_corpus(translator, args, generate)
    if args.html or args.split_sentences:
        return translate_documents(translator, batches, args, generate)
    prefixes = read_lines(args.prefix, "--prefix") if args.prefix else None
    done = 0  # lines answered so far: the index of --nbest's output and of --prefix's lines
    for batch in batches:
        if prefixes is not None:
            if done + len(batch) > len(prefixes):
                raise ValueError(f"--prefix {args.prefix} has {len(prefixes)} lines for more inputs")
            generate["prefixes"] = prefixes[done : done + len(batch)]
        try:
            best = translator.nbest(batch, args.nbest or 1, batch_tokens=args.batch_tokens, **generate)
        except TextError as error:  # a sentence given on the command line (standard input is decoded strictly)
            where = "sentence" if args.text else "standard input line"
            raise ValueError(f"{where} {done + error.index + 1} {error.reason}") from None
        for index, hypotheses in enumerate(best, start=done):
            if not args.nbest:  # one line out per line in, whatever the model emits
                print(aligned_line(hypotheses[0][1:], args.print_alignment))
                continue
            for rank, (score, *text) in enumerate(hypotheses):
                print(nbest_line(index, rank, score, text, args.format))
        sys.stdout.flush()
        done += len(batch)
    if prefixes is not None and done != len(prefixes):
        raise ValueError(f"--prefix {args.prefix} has {len(prefixes)} lines for {done} inputs")


def translate_documents(translator, batches, args, generate: dict) -> None:
    """--html and --split_sentences: each input line a document whose texts (an HTML fragment's text runs, a
    paragraph's sentences) are translated together and the line rebuilt around their translations, one line out per
    line in. With --html and an engine that aligns, inline markup is placed by the alignment of each sentence
    translated whole (`aayn.translation.markup`); --split_sentences splits by the rules of the source language
    (`aayn.translation.sentences`)."""
    from .translation.markup import Fragment
    from .translation.sentences import Sentences

    aligned = args.html and "alignment" in translator.abilities
    if aligned:
        from .translation.alignment import AlignmentSettings

        generate["alignment"] = AlignmentSettings()
    split = sentence_splitter(args)
    for batch in batches:
        documents = [Fragment(line, aligned=aligned, split=split) if args.html else Sentences(line, split)
                     for line in batch]  # fmt: skip
        texts = [text for document in documents for text in document.texts]
        best = translator.nbest(texts, 1, batch_tokens=args.batch_tokens, **generate) if texts else []
        start = 0
        for document in documents:
            chosen = [hypotheses[0] for hypotheses in best[start : start + len(document.texts)]]
            start += len(document.texts)
            alignments = [hypothesis[2] for hypothesis in chosen] if aligned else None
            print(" ".join(document.rebuilt([h[1] for h in chosen], alignments).splitlines()))
        sys.stdout.flush()


def check_translate_arguments(args: argparse.Namespace) -> None:
    """The flags of `aayn translate` that do not go together, each refused in one line."""
    if (args.nbest or args.prefix) and args.show_attention:
        raise ValueError("--show_attention draws one plain translation: no --nbest or --prefix with it")
    if args.format is not None and not args.nbest:
        raise ValueError(f"--format {args.format} needs --nbest N")
    if args.source_lang and not (args.split_sentences or args.file):
        raise ValueError("--source_lang names the language --split_sentences or --file splits by: give one")
    if (args.ray or args.ray_address) and not args.input:
        raise ValueError("--ray translates a corpus of shards: give --input GLOB_OR_FOLDER --output_dir OUT")
    if args.ray or args.ray_address:
        check_actor_device(args.device, args.num_gpus_per_worker)
    if bool(args.input) != bool(args.output_dir):
        raise ValueError("--input GLOB_OR_FOLDER and --output_dir OUT go together: a corpus of shards translated")
    if args.input and (
        args.text or args.file or args.prefix or args.html or args.split_sentences or args.nbest or args.show_attention
    ):
        raise ValueError(
            "--input translates shards line for line: no texts, --file, --prefix (it reads a second file line by "
            "line), --html, --split_sentences, --nbest or --show_attention with it"
        )
    if bool(args.file) != bool(args.output):
        raise ValueError("--file IN and --output OUT go together: a document translated into a new file")
    if args.file and (
        args.text
        or args.html
        or args.split_sentences
        or args.nbest
        or args.prefix
        or args.show_attention
        or args.print_alignment
    ):
        raise ValueError("--file translates one document: no texts, --html, --split_sentences, --nbest, --prefix, "
                         "--show_attention or --print_alignment with it")  # fmt: skip
    for flag, what in (("html", "each line's HTML"), ("split_sentences", "each line's sentences")):
        if getattr(args, flag) and (args.nbest or args.prefix or args.show_attention or args.print_alignment):
            raise ValueError(f"--{flag} translates {what} once: no --nbest, --prefix, --show_attention or "
                             "--print_alignment with it")  # fmt: skip


def check_actor_device(device: str, gpus: float) -> None:
    """--device and --num_gpus_per_worker of Ray's actors, which translate on the GPUs Ray gives them (as `cuda`;
    Ray hides the others, and every GPU from an actor that holds none), or on CPU."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device {device} with --ray: an actor sees the GPUs Ray gives it as cuda; give --device "
                         "cuda with --num_gpus_per_worker, or cpu")  # fmt: skip
    if device == "cuda" and not gpus:
        raise ValueError("--device cuda with --ray needs --num_gpus_per_worker: Ray hides the GPUs from an actor that "
                         "holds none")  # fmt: skip
    if device == "cpu" and gpus:
        raise ValueError(f"--num_gpus_per_worker {gpus:g} holds GPUs that actors on --device cpu leave idle: add "
                         "--device cuda")  # fmt: skip


def translate_corpus(translator, args: argparse.Namespace, generate: dict) -> None:
    """--input GLOB_OR_FOLDER --output_dir OUT: each shard without an output translated into one of the same name
    and format (`aayn.translation.bulk`), whole or not at all; a summary line on standard error."""
    from .translation.bulk import BulkSettings, shards_of, translate_shards

    shards = shards_of(args.input)
    settings = BulkSettings(Path(args.output_dir), args.text_field, args.batch_tokens, generate)
    if args.ray or args.ray_address:
        from .translation.bulk_ray import translate_shards_on_ray

        needs = ("glossary",) * bool(args.glossary) + ("alignment",) * bool(args.print_alignment)
        done = translate_shards_on_ray(args.model, args.device, needs, shards, settings, address=args.ray_address,
                                       concurrency=args.concurrency, num_cpus=args.num_cpus_per_worker,
                                       num_gpus=args.num_gpus_per_worker)  # fmt: skip
    else:
        done = translate_shards(translator, shards, settings, log=lambda line: print(line, file=sys.stderr))
    print(f"{done['shards']} shards ({done['already_done']} already done), {done['lines']} lines translated into "
          f"{done['output_dir']} in {done['seconds']} s", file=sys.stderr)  # fmt: skip


def translate_file(translator, args: argparse.Namespace, generate: dict) -> None:
    """--file IN --output OUT: a document (.txt .html .srt .docx .odt .pptx .odp .epub) translated whole, its
    sentences split by the source language's rules, its formatting kept (`aayn.translation.documents`); OUT written
    whole."""
    from .folders import staged_file
    from .translation.documents import read_document

    source = Path(args.file)
    if not source.is_file():
        raise FileNotFoundError(f"--file {args.file}: no such file")
    aligned = "alignment" in translator.abilities
    if aligned:
        from .translation.alignment import AlignmentSettings

        generate["alignment"] = AlignmentSettings()
    args.split_sentences = True
    document = read_document(source.name, source.read_bytes(), aligned=aligned, split=sentence_splitter(args))
    texts = document.texts
    best = translator.nbest(texts, 1, batch_tokens=args.batch_tokens, **generate) if texts else []
    alignments = [hypotheses[0][2] for hypotheses in best] if aligned else None
    data = document.translated([hypotheses[0][1] for hypotheses in best], alignments)
    with staged_file(Path(args.output)) as partial:
        partial.write_bytes(data)
    print(f"{args.file} -> {args.output}: {len(texts)} sentences translated", file=sys.stderr)


def sentence_splitter(args: argparse.Namespace):
    """--split_sentences: the splitter of --source_lang, else of the source language the folder's card names
    (None without the flag)."""
    if not args.split_sentences:
        return None
    from .translation.sentences import splitter

    language = args.source_lang or card_languages(args.model)[0]
    if not language:
        raise ValueError(f"--split_sentences: the card of {args.model[0]} names no source language; give its code "
                         "(--source_lang en)")  # fmt: skip
    return splitter(language)


def aligned_line(hypothesis: tuple, form: str | None) -> str:
    """A translation's line: its text; with --print_alignment, TEXT<TAB>PAIRS (hard) or a JSON object (json)."""
    text = " ".join(hypothesis[0].splitlines())
    if form == "json":
        import json

        return json.dumps({"text": text, **hypothesis[1].as_dict()}, ensure_ascii=False)
    return f"{text}\t{hypothesis[1].pairs()}" if form else text


def nbest_line(index: int, rank: int, score: float, hypothesis: list, form: str | None) -> str:
    """One --nbest line: INDEX<TAB>SCORE<TAB>TEXT[<TAB>PAIRS], or a JSON object (jsonl, alignment fields too)."""
    text = " ".join(hypothesis[0].splitlines())
    aligned = hypothesis[1] if len(hypothesis) > 1 else None
    if form == "jsonl":
        import json

        extra = aligned.as_dict() if aligned is not None else {}
        return json.dumps({"index": index, "rank": rank, "score": score, "text": text, **extra}, ensure_ascii=False)
    return f"{index}\t{score:.6f}\t{text}" + (f"\t{aligned.pairs()}" if aligned is not None else "")


def score(args: argparse.Namespace) -> None:
    """Score given translations: per line pair, log P(target | source) (eos included) and the length-normalized
    score the paper's search ranks by, tab-separated, in input order (--per_token: each target token's too)."""
    from .translation.opening import open_translator

    sources, targets = (read_lines(path, flag) for path, flag in ((args.source, "--source"), (args.target, "--target")))
    if len(sources) != len(targets):
        raise ValueError(f"--source {args.source} has {len(sources)} lines, --target {args.target} {len(targets)}")
    alignment = None
    if args.print_alignment:
        from .translation.alignment import AlignmentSettings

        alignment = AlignmentSettings(args.alignment_layer, args.alignment_heads)
    needs = ("scores",) + ("alignment",) * bool(alignment)
    translator = open_translator([args.model], args.device, needs=needs)
    scores = translator.score(
        sources, targets, length_penalty=args.length_penalty, per_token=args.per_token,
        batch_tokens=args.batch_tokens, alignment=alignment,
    )  # fmt: skip
    for pair in scores:
        if args.print_alignment == "json":
            import json

            fields = {"log_prob": pair.log_prob, "score": pair.score}
            fields.update({"tokens": pair.tokens} if args.per_token else {})
            print(json.dumps({**fields, **pair.alignment.as_dict()}, ensure_ascii=False))
            continue
        columns = [f"{pair.log_prob:.6f}", f"{pair.score:.6f}"]
        if args.per_token:
            columns.append(" ".join(f"{value:.6f}" for value in pair.tokens))
        if alignment is not None:
            columns.append(pair.alignment.pairs())
        print("\t".join(columns))


def read_lines(path: str, flag: str) -> list[str]:
    """The lines of a UTF-8 text file, without their line ends; `-` is standard input."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag} {path}: no such file") from None
    lines = _decoded(data, f"{flag} {path}")
    return lines[:-1] if lines and lines[-1] == "" else lines  # the newline that ends the last line


def generate_options(args: argparse.Namespace) -> dict:
    """The decoding flags a user set (the others come from the model's generation config)."""
    return {
        name: getattr(args, name)
        for name in ("num_beams", "length_penalty", "max_new_tokens")
        if getattr(args, name) is not None
    }


def serve(args: argparse.Namespace) -> None:
    """Serve saved models (a pair each, or several as an ensemble), CTranslate2 or ONNX exports over HTTP:
    LibreTranslate's API and the Hub's request shape on POST /translate, GET /languages, POST /detect, a page at /;
    concurrent requests are batched by tokens, a batcher per pair."""
    from . import MissingExtra

    if args.verb and args.verb[0] == "suggestions":
        from .serve.suggestions import suggestions_command

        return suggestions_command(args.verb, args.suggestions_db_path, args.output)
    if args.verb:
        from .serve.keys import keys_command

        return keys_command(args.verb, args.api_keys_db_path, args.max_chars, args.key)
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        raise MissingExtra("aayn serve needs starlette and uvicorn: pip install 'aayn[serve]'") from error
    from .serve import Pair, ServeSettings
    from .serve import serve as run_server
    from .serve.keys import access_of

    if args.max_wait_ms < 0:
        raise ValueError(f"--max_wait_ms must be >= 0, got {args.max_wait_ms}")
    if bool(args.model) == bool(args.pair):
        raise ValueError("give --model (one direction; repeat it for an ensemble) or --pair SRC:TGT=FOLDER (repeat it)")
    access = access_of(args)
    served = [served_pair(value) for value in args.pair] if args.pair else [(*card_languages(args.model), args.model)]
    seen = [(source, target) for source, target, _ in served if source]
    if len(seen) != len(set(seen)):
        raise ValueError(f"--pair serves a direction twice: {sorted(seen)}")
    pairs = [Pair(source, target, names, open_served(args, names)) for source, target, names in served]
    settings = ServeSettings(
        batch_tokens=args.batch_tokens,
        max_wait_ms=args.max_wait_ms,
        max_queue=args.max_queue,
        max_sentences=args.max_sentences,
        max_chars=args.max_chars or ServeSettings.max_chars,
        metrics=args.metrics,
        metrics_auth_token=args.metrics_auth_token,
        suggestions=args.suggestions,
        suggestions_db_path=args.suggestions_db_path,
        disable_files_translation=args.disable_files_translation,
        max_file_bytes=int(args.files_max_mb * 1024 * 1024),
        files_expire_s=args.files_expire_minutes * 60,
    )
    if args.files_max_mb <= 0 or args.files_expire_minutes <= 0:
        raise ValueError("--files_max_mb and --files_expire_minutes must be > 0")
    if args.metrics_auth_token and not args.metrics:
        raise ValueError("--metrics_auth_token guards GET /metrics: give --metrics too")
    run_server(pairs, settings, args.host, args.port, access)


def served_pair(value: str) -> tuple[str, str, list[str]]:
    """`--pair SRC:TGT=FOLDER` as (source, target, [folder])."""
    languages, _, folder = value.partition("=")
    source, _, target = languages.partition(":")
    if not (source and target and folder) or not (source.isalpha() and target.isalpha()) or source == target:
        raise ValueError(f"--pair {value}: give SRC:TGT=FOLDER with two language codes, e.g. en:fr=runs/demo")
    return source.lower(), target.lower(), [folder]


def card_languages(names: list[str]) -> tuple[str | None, str | None]:
    """The direction the first --model's card names (None, None where it names none: the Hub's shape only)."""
    from .hub import card_metadata

    card = card_metadata(names[0]) if Path(names[0]).is_dir() else None
    return (card["source_lang"], card["target_lang"]) if card else (None, None)


def open_served(args: argparse.Namespace, names: list[str]) -> list:
    """The translators of one served pair: one in this process, or --workers processes of its own."""
    from .checks import available_cores
    from .serve import start_workers
    from .translation.opening import open_translator

    # CTranslate2 folders need no torch, nor does the server itself where worker processes hold the model
    setup = functools.partial(prepare_transformers, progress_bars=args.verbose)
    if args.workers == 1:
        return [open_translator(names, args.device, threads=args.threads, setup=setup)]
    threads = args.threads or max(1, available_cores() // args.workers)  # sharing the cores unless told otherwise
    return start_workers(names, args.device, args.workers, threads, setup)


def bench(args: argparse.Namespace) -> None:
    """Measure AAYN against MarianMTModel at the paper's base shapes (train, greedy, beam rows; MFU)."""
    from .bench import print_table, run_bench, write_json
    from .bench.common import demo_run_model
    from .checks import check_device

    check_device(args.device)
    decoding_model = args.decoding_model or demo_run_model()
    report = run_bench(
        quick=args.quick, device=args.device, dtype=args.dtype, wmt=args.wmt, decoding_model=decoding_model
    )
    if args.json:  # first: a long run's numbers survive whatever happens while printing them
        write_json(report, args.json)
    print_table(report)


def export(args: argparse.Namespace) -> None:
    """Convert a saved model for another inference engine (CTranslate2, ONNX Runtime, Argos Translate)."""
    from .formats import FORMATS

    entry = FORMATS[args.format]
    other = "--output" if entry.output_option == "--output_dir" else "--output_dir"
    output = getattr(args, entry.output_option[2:], None)
    if not output or getattr(args, other[2:], None):
        wanted = f"{entry.output_option} {entry.output_metavar}"
        raise ValueError(f"--format {args.format} writes {wanted} (and not the other)")
    output = entry.write(args.model, output, **format_options(args, entry, "export"))
    print(f"{args.format} model written to {output}")


def import_model(args: argparse.Namespace) -> None:
    """Bring a model trained elsewhere in as an aayn folder (fairseq's Transformer)."""
    from .formats import FORMATS

    entry = FORMATS[args.format]
    output = entry.write(args.checkpoint, args.output_dir, **format_options(args, entry, "import"))
    print(f"{args.format} model imported into {output}")


def format_options(args: argparse.Namespace, entry, command: str) -> dict:
    """The arguments given that the format declares, as keywords of its `write`; one line for an argument given
    that belongs to other formats only."""
    from .formats import FORMATS

    options = {}
    for flag in declared_arguments(command):
        key, value = flag[2:], getattr(args, flag[2:])
        if flag in entry.arguments:
            options[key] = value
        elif value is not None:
            owners = [name for name, other in FORMATS.items() if flag in other.arguments]
            raise ValueError(f"{flag} is an argument of {' and '.join(owners)}, not of {args.format}")
    return options


def declared_arguments(command: str) -> dict[str, list]:
    """{flag: [(format name, its argparse keywords), ...]} of the formats `aayn COMMAND` writes."""
    from .formats import FORMATS

    direction = {"export": "out", "import": "in"}[command]
    flags: dict[str, list] = {}
    for name, entry in FORMATS.items():
        if entry.direction == direction:
            for flag, keywords in entry.arguments.items():
                flags.setdefault(flag, []).append((name, keywords))
    return flags


class _StderrHandler(logging.StreamHandler):
    """A handler writing to `sys.stderr` as it is at each record, not as it was when `main` first ran (a caller
    that runs `main` more than once, with stderr redirected in between, would write to a closed stream)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def setup_logging() -> None:
    """Progress of aayn's own work at INFO; transformers keeps its default (warnings)."""
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger = logging.getLogger("aayn")
    if not logger.handlers:
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def prepare_transformers(progress_bars: bool) -> None:
    """Registers aayn with transformers' Auto classes (importing transformers and torch); without `progress_bars`
    no "Loading weights" bar (the inference commands' default: `--verbose` keeps it)."""
    register()
    if not progress_bars:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number of at least 0, got {text}")
    return value


# What a user's input or setup can get wrong (a recipe, a path, a folder, a value, an extra not installed): one line
# naming it, no traceback.
# Anything else is a bug and keeps its traceback; --debug keeps it for these too.
USER_ERRORS = (ValueError, OSError, FloatingPointError, MissingExtra)


def report_user_errors(command: str, work, debug: bool) -> int:
    """Run `work()`; a user error prints `aayn COMMAND: error: ...` and returns 2 (argparse's code for usage)."""
    try:
        work()
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"aayn {command}: error: {error}\n(run with --debug for the traceback)", file=sys.stderr)
        return 2
    return 0


def copy_task_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output_dir", default="runs/copy-task", help="where to save the trained model")
    parser.add_argument("--steps", type=positive_int, default=400, help="training steps (default: 400)")
    parser.add_argument("--seed", type=int, default=0)


def recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """train, preprocess: everything after the command is the recipe parser's (`--help` included)."""
    parser.add_argument("recipe_and_flags", nargs=argparse.REMAINDER, help="RECIPE.yaml [--key value ...]")


def average_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output_dir", required=True, help="new folder for the averaged model")
    parser.add_argument("checkpoints", nargs="+", help="checkpoint folders (model.safetensors + config.json)")


def decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """What evaluate and translate share."""
    parser.add_argument(
        "--model",
        required=True,
        action="append",
        help="saved model folder or Hub id (translate: repeat for an ensemble)",
    )
    parser.add_argument("--num_beams", type=positive_int, help="default: the model's generation config")
    parser.add_argument("--length_penalty", type=float, help="alpha of the length penalty; choose it on validation")
    parser.add_argument("--max_new_tokens", type=positive_int)
    batch_tokens_argument(parser, "padded source tokens per batch")
    device_argument(parser)


def batch_tokens_argument(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--batch_tokens", type=positive_int, default=DECODING_BATCH_TOKENS, help=text)


def device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps, ...")


def evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    decoding_arguments(parser)
    parser.add_argument("--dataset_name", required=True, help='Hub id, local folder, or "bible"')
    parser.add_argument("--dataset_config_name")
    parser.add_argument("--source_lang", required=True)
    parser.add_argument("--target_lang", required=True)
    parser.add_argument("--split", default="test", help="split expression, slicing allowed (default: test)")
    parser.add_argument("--max_samples", type=positive_int)
    parser.add_argument("--output", metavar="FILE", help="also write the translations there, one line per sentence")
    parser.add_argument(
        "--any_direction", action="store_true", help="score a model whose card names another direction (a warning)"
    )


def alignment_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--print_alignment",
        nargs="?",
        const="hard",
        choices=["hard", "json"],
        help="word alignments from cross-attention: hard (fairseq's i-j pairs of token positions, a last column) or "
        "json (a JSON object a line, with the links' weights and the tokens)",
    )
    parser.add_argument(
        "--alignment_layer", type=int, help="the decoder layer that aligns, from 0 (default: the last, as fairseq)"
    )
    parser.add_argument(
        "--alignment_heads", type=positive_int, help="average its first N heads (default: all, as fairseq)"
    )


def translate_arguments(parser: argparse.ArgumentParser) -> None:
    decoding_arguments(parser)
    parser.add_argument("text", nargs="*", help="sentences to translate; none: read standard input")
    parser.add_argument(
        "--buffer_size",
        type=positive_int,
        help="at most this many lines of standard input per batch (default: every line there is to "
        "read; a terminal's or a slow pipe's lines are answered as they arrive either way)",
    )
    parser.add_argument(
        "--show_attention",
        "--show-attention",
        metavar="FILE.png",
        help="draw the last layer's cross-attention for a single sentence",
    )
    parser.add_argument(
        "--per_head", "--per-head", action="store_true", help="with --show_attention: one panel per head"
    )
    parser.add_argument(
        "--nbest", type=positive_int, help="the N best hypotheses of every input, ranked as the search ranks them"
    )
    parser.add_argument(
        "--format",
        choices=["tsv", "jsonl"],
        help="with --nbest: tsv (INDEX<TAB>SCORE<TAB>TEXT per hypothesis, the default) or jsonl",
    )
    parser.add_argument(
        "--prefix", metavar="FILE", help="target prefixes, one per input line (empty lines for none), to continue from"
    )
    parser.add_argument(
        "--glossary",
        metavar="TERMS.tsv",
        help="source term<TAB>target term per line: a sentence containing a source term (its words, case as "
        "written) gets the target term in its translation (lexically constrained search)",
    )
    alignment_arguments(parser)
    parser.add_argument(
        "--html",
        action="store_true",
        help="each input line is HTML: tags, comments and entities kept; inline markup (<b>, <a href>, ...) placed "
        "around the words aligned to its own (an engine that aligns) or each text run translated alone",
    )
    parser.add_argument(
        "--split_sentences",
        "--split-sentences",
        action="store_true",
        help="each input line is a paragraph: split into sentences by the rules of the source language, "
        "translated, and put back with the line's own spacing",
    )
    parser.add_argument(
        "--source_lang",
        "--source-lang",
        metavar="CODE",
        help="with --split_sentences or --file: the source language's code (default: the one the folder's card names)",
    )
    parser.add_argument(
        "--file",
        metavar="IN",
        help="translate a document (.txt .html .srt .docx .odt .pptx .odp .epub) into --output, its formatting kept",
    )
    parser.add_argument("--output", metavar="OUT", help="with --file: the translated document (written whole)")
    parser.add_argument(
        "--input",
        metavar="GLOB_OR_FOLDER",
        help="a corpus of shards (text lines, .jsonl, .parquet): each translated into --output_dir under its own name, "
        "whole or not at all; a rerun translates only the shards not yet there",
    )
    parser.add_argument("--output_dir", metavar="OUT", help="with --input: the folder of translated shards")
    parser.add_argument(
        "--text_field", default="text", help="with --input: the field of .jsonl / .parquet rows to translate"
    )
    parser.add_argument("--ray", action="store_true", help="with --input: the shards translated by Ray actors")
    parser.add_argument("--ray_address", help="with --ray: an existing cluster's address (default: start a local one)")
    parser.add_argument("--concurrency", type=positive_int, default=1, help="with --ray: actors, each one translator")
    parser.add_argument("--num_cpus_per_worker", type=positive_float, default=1.0, help="with --ray: CPUs each actor "
                        "holds")  # fmt: skip
    parser.add_argument("--num_gpus_per_worker", type=non_negative_float, default=0.0, help="with --ray: GPUs each "
                        "actor holds (with --device cuda; fractions share one)")  # fmt: skip


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    from .serve import ServeSettings  # the server's defaults are the flags'

    defaults = ServeSettings()
    parser.add_argument(
        "--model",
        action="append",
        help="saved model folder, Hub id, CTranslate2 or ONNX export (repeat for an ensemble); its card's languages",
    )
    parser.add_argument(
        "--pair",
        action="append",
        metavar="SRC:TGT=FOLDER",
        help="a served language pair and its model (repeat for more pairs; each has its own batcher)",
    )
    parser.add_argument(
        "verb",
        nargs="*",
        metavar="keys [add REQ_LIMIT | remove KEY] | suggestions [export]",
        help="instead of serving, as LibreTranslate's ltmanage: manage the API keys of --api_keys_db_path (list them, "
        "add one: REQ_LIMIT requests a minute, --char_limit N characters a text, --key KEY, prints the key; remove "
        "one), or list the suggestions of --suggestions_db_path and export them (--output DIR) as a corpus",
    )
    access_arguments(parser)
    device_argument(parser)
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    batch_tokens_argument(parser, "padded source tokens per batch")
    parser.add_argument(
        "--max_wait_ms", type=float, default=defaults.max_wait_ms, help="how long a sentence waits for others"
    )
    parser.add_argument(
        "--max_queue", type=positive_int, default=defaults.max_queue, help="sentences waiting; beyond: 503"
    )
    parser.add_argument(
        "--batch_limit", "--max_sentences", dest="max_sentences", type=positive_int, default=defaults.max_sentences,
        help="texts per request; beyond: 400 (LibreTranslate's shape), 413 (the Hub's)"
    )  # fmt: skip
    parser.add_argument(
        "--char_limit", "--char-limit", "--max_chars", dest="max_chars", type=positive_int,
        help=f"characters per text (default {defaults.max_chars}; a key's own limit replaces it; with keys add: the "
        "key's): beyond, 400 (LibreTranslate's shape), 413 (the Hub's)"
    )  # fmt: skip
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="CPU threads a model call uses (default: all cores, shared out among --workers); with a "
        "CTranslate2 export, 1 can answer small batches several times faster "
        "(docs/measurements.md)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="processes holding the model, decoding batches side by side (default 1: a thread of "
        "the server); on a few cores, 2 serve a few dozen clients faster "
        "(docs/measurements.md)",
    )


def access_arguments(parser: argparse.ArgumentParser) -> None:
    """aayn serve's keys, limits, files and metrics, under LibreTranslate's names."""
    parser.add_argument(
        "--disable_files_translation", action="store_true", help="no POST /translate_file (403) nor GET "
        "/download_file (400), as LibreTranslate's flag"
    )  # fmt: skip
    parser.add_argument("--files_max_mb", type=float, default=20.0, help="the largest file to translate (MB)")
    parser.add_argument(
        "--files_expire_minutes", type=float, default=30.0, help="how long a translated file can be downloaded"
    )
    parser.add_argument(
        "--api_keys",
        nargs="?",
        const=True,
        metavar="FILE",
        help="keys on (LibreTranslate's switch): keys from --api_keys_db_path, an unknown key refused (403); "
        "FILE: keys one a line, added to the database first",
    )
    parser.add_argument(
        "--api_keys_db_path", "--api-keys-db-path", default="db/api_keys.db", metavar="FILE", help="the keys' SQLite "
        "file (LibreTranslate's schema: its own file serves; created where missing; default: db/api_keys.db)"
    )  # fmt: skip
    parser.add_argument("--key", help="with keys add: the key to add (default: a new UUID), as ltmanage's --key")
    parser.add_argument(
        "--suggestions", action="store_true", help="POST /suggest stores the translations clients suggest (default: "
        "403, as LibreTranslate's --suggestions)"
    )  # fmt: skip
    parser.add_argument(
        "--suggestions_db_path", default="db/suggestions.db", metavar="FILE", help="the suggestions' SQLite file "
        "(LibreTranslate's schema and default path)"
    )  # fmt: skip
    parser.add_argument("--output", metavar="DIR", help="with suggestions export: the corpus's folder (new)")
    parser.add_argument(
        "--req_limit", type=int, default=-1, help="requests a minute per client (its key, else its address; a key's "
        "own limit replaces it): beyond, 429 (default -1: none)"
    )  # fmt: skip
    parser.add_argument(
        "--require_api_key_origin", metavar="REGEX", help="with --api_keys: a keyless request from another Origin "
        "than this must carry a key (400)"
    )  # fmt: skip
    parser.add_argument(
        "--metrics", action="store_true", help="GET /metrics in Prometheus' format (requests, latency, queue depth, "
        "texts and characters translated), as LibreTranslate's --metrics"
    )  # fmt: skip
    parser.add_argument(
        "--metrics_auth_token", metavar="TOKEN", help="with --metrics: only `Authorization: Bearer TOKEN` reads it"
    )
    parser.add_argument(
        "--require_api_key_secret", action="store_true", help="with --api_keys: a keyless request must carry the "
        "secret the server's own page sends"
    )  # fmt: skip


def score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="saved model folder or Hub id")
    parser.add_argument("--source", required=True, help="source sentences, one per line (- for standard input)")
    parser.add_argument("--target", required=True, help="their translations, one per line, aligned with --source")
    parser.add_argument("--length_penalty", type=float, help="alpha of the score's normalization (default: model's)")
    parser.add_argument("--per_token", action="store_true", help="a third column: each target token's log P")
    alignment_arguments(parser)
    batch_tokens_argument(parser, "padded tokens per batch")
    device_argument(parser)


def bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="fewer repeats and smaller batches (~3 min on 2 cores)")
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--wmt",
        default=os.environ.get("AAYN_WMT14_MINI"),
        help="a folder laid out like the Hub's wmt/wmt14 (de-en test split) for newstest2014 sentence "
        "lengths; default: $AAYN_WMT14_MINI, else a built-in sample of them",
    )
    parser.add_argument(
        "--decoding_model",
        help="a saved English -> X aayn model for the default-decoding rows; default: the demo job's "
        "(recipes/demo.yaml's output_dir) if it is there, else a model trained in the bench for a few "
        "hundred steps",
    )


def export_arguments(parser: argparse.ArgumentParser) -> None:
    from .formats import exports

    parser.add_argument("--format", required=True, choices=exports())
    parser.add_argument("--model", required=True, help="saved model folder (weights, config, tokenizer)")
    format_arguments(parser, "export")


def import_arguments(parser: argparse.ArgumentParser) -> None:
    from .formats import FORMATS, imports

    parser.add_argument("format", choices=imports())
    parser.add_argument("checkpoint", help="; ".join(f"{name}: {FORMATS[name].source_help}" for name in imports()))
    format_arguments(parser, "import")


def format_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The output options and each format's own arguments (`Format.arguments`), one flag each whatever the number
    of formats that declare it (each format checks its own values)."""
    from .formats import FORMATS

    direction = {"export": "out", "import": "in"}[command]
    writes = {entry.output_option: [] for entry in FORMATS.values() if entry.direction == direction}
    for name, entry in FORMATS.items():
        if entry.direction == direction:
            writes[entry.output_option].append(name)
    for option, names in writes.items():
        what = "new folder" if option == "--output_dir" else "new file"
        parser.add_argument(option, required=command == "import", help=f"{what} ({', '.join(names)})")
    for flag, declared in declared_arguments(command).items():
        helps = [keywords.get("help", "") for _, keywords in declared]
        parser.add_argument(flag, help="; ".join(dict.fromkeys(text for text in helps if text)))


class Command(NamedTuple):
    """One subcommand: its handler, the function adding its arguments, and when transformers is set up for it
    ("quiet": before it runs, without model loading's progress bars unless --verbose; "bars": before it runs, with
    them; "itself": the handler does it, once it knows it needs it: a recipe parsed, a folder not CTranslate2's)."""

    run: Callable[[argparse.Namespace], None]
    arguments: Callable[[argparse.ArgumentParser], None]
    transformers: str


COMMANDS = {
    "copy-task": Command(copy_task, copy_task_arguments, "bars"),
    "train": Command(train, recipe_arguments, "itself"),
    "preprocess": Command(preprocess, recipe_arguments, "itself"),
    "average": Command(average, average_arguments, "bars"),
    "evaluate": Command(evaluate, evaluate_arguments, "quiet"),
    "translate": Command(translate, translate_arguments, "itself"),
    "serve": Command(serve, serve_arguments, "itself"),
    "score": Command(score, score_arguments, "quiet"),
    "bench": Command(bench, bench_arguments, "bars"),
    "export": Command(export, export_arguments, "quiet"),
    "import": Command(import_model, import_arguments, "quiet"),
}
RECIPE_COMMANDS = ("train", "preprocess")  # all after them is the recipe parser's: no argparse of their own


def command_line_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The aayn command's parser; only `command`'s subparser gets its arguments (each command's own, such as the
    server's defaults, cost nothing to the others: the top-level help lists the commands alone)."""
    epilog = "--debug anywhere: tracebacks for errors; --verbose: model loading's progress bars"
    parser = argparse.ArgumentParser(prog="aayn", description=__doc__, epilog=epilog)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, entry in COMMANDS.items():
        sub = commands.add_parser(name, help=entry.run.__doc__, add_help=name not in RECIPE_COMMANDS)
        if name == command:
            entry.arguments(sub)
        sub.set_defaults(run=entry.run)
    return parser


def parsed(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments, with `aayn serve`'s verb words wherever they stand among its flags (`keys --api_keys_db_path F
    add 100`, as ltmanage takes them; argparse takes a list of positionals only in one run)."""
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "verb", None) and not any(word.startswith("-") for word in extra):
        args.verb += extra
        return args
    return parser.parse_args(argv) if extra else args


def main(argv: list[str] | None = None) -> int:
    register_later()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug, verbose = "--debug" in argv, "--verbose" in argv
    argv = [arg for arg in argv if arg not in ("--debug", "--verbose")]
    if argv[:1] and argv[0] in RECIPE_COMMANDS:
        args = argparse.Namespace(command=argv[0], recipe_and_flags=argv[1:], run=COMMANDS[argv[0]].run)
    else:
        args = parsed(command_line_parser(argv[0] if argv else None), argv)
    setup_logging()
    args.verbose = verbose
    setup = COMMANDS[args.command].transformers
    if setup != "itself":
        prepare_transformers(progress_bars=verbose or setup == "bars")
    return report_user_errors(args.command, lambda: args.run(args), debug)


if __name__ == "__main__":
    sys.exit(main())
