"""`aayn translate`: sentences, standard input as it arrives, documents (`--file`), corpora of shards
(`--input`, on Ray with `--ray`), HTML and paragraphs split into sentences; n-best lists, prefixes, glossaries,
alignments, attention drawn."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from ..formats.translator import TextError
from .arguments import (
    alignment_arguments,
    card_languages,
    check_actor_device,
    decoded_lines,
    decoding_arguments,
    engine_options,
    generate_options,
    positive_int,
    prepare_transformers,
    ray_arguments,
    read_lines,
)


def translate(args: argparse.Namespace) -> None:
    """Translate the given sentences, or standard input as its lines arrive, to standard output (one line per
    line, flushed after each batch)."""
    from ..translation.opening import open_translator, translator_format
    from ..translation.targets import aimed, check_direction

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
    generate, needs = translate_options(args)
    options = engine_options(args)
    if args.pivot and (args.input or args.show_attention):
        raise ValueError("--pivot translates text, documents and files: not with --input or --show_attention")
    if args.input and (args.ray or args.ray_address):  # each actor opens its own: the driver loads no model
        check_direction(args.model, args.source_lang, args.target_lang, None)
        entry, _ = translator_format(args.model, needs, options)  # what they do, before Ray starts
        if args.device not in entry.devices:
            raise ValueError(f"--device {args.device}: aayn runs {entry.title} folders on {' or '.join(entry.devices)}")
        return translate_corpus(None, args, generate, needs, options)
    setup = functools.partial(prepare_transformers, progress_bars=args.verbose)  # not for a CTranslate2 folder
    translator = open_translator(args.model, args.device, needs, setup=setup, options=options)
    translator = aimed(translator, args.model, args.source_lang, args.target_lang, args.pivot)
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
        return translate_corpus(translator, args, generate, needs, options)
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


def translate_options(args: argparse.Namespace) -> tuple[dict, tuple[str, ...]]:
    """(`nbest`'s keywords, the abilities they need of the engine) of the decoding, glossary and alignment flags."""
    generate = generate_options(args)
    if args.glossary:
        from ..model.glossary_aayn import Glossary

        if args.show_attention:
            raise ValueError("--show_attention draws one plain translation: no --glossary with it")
        if not Path(args.glossary).is_file():
            raise FileNotFoundError(f"--glossary {args.glossary}: no such file")
        generate["glossary"] = Glossary.read(args.glossary)
    if args.print_alignment:
        from ..formats.alignment import AlignmentSettings

        key = "alignment_settings" if args.show_attention else "alignment"
        generate[key] = AlignmentSettings(args.alignment_layer, args.alignment_heads)
    needs = ("prefixes",) * bool(args.prefix) + ("attention",) * bool(args.show_attention)
    needs += ("glossary",) * bool(args.glossary) + ("alignment",) * bool(args.print_alignment)
    needs += ("sampling",) * bool(args.sampling)
    return generate, needs


def input_batches(stream, buffer_size: int | None):
    """The lines of a binary stream, in batches as they arrive, the way fairseq-interactive reads: a batch is every
    whole line there is to read without waiting (at most `buffer_size`), so a terminal or a pipe fed line by line
    gets each answer at once, and a file or a fast pipe is translated in large, length-sorted batches."""
    import os
    import select

    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file descriptor (an in-memory stream): all at once
        lines = decoded_lines(stream.read(), "standard input")
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
        lines = decoded_lines(whole, "standard input", seen + 1)
        seen += len(lines)
        step = buffer_size or len(lines)
        for start in range(0, len(lines), step):
            yield lines[start : start + step]


def check_translate_arguments(args: argparse.Namespace) -> None:
    """The flags of `aayn translate` that do not go together, each refused in one line."""
    if (args.nbest or args.prefix) and args.show_attention:
        raise ValueError("--show_attention draws one plain translation: no --nbest or --prefix with it")
    if args.format is not None and not args.nbest:
        raise ValueError(f"--format {args.format} needs --nbest N")
    if args.source_lang and not (args.split_sentences or args.file or args.target_lang):
        raise ValueError("--source_lang names the language --split_sentences or --file splits by, or with "
                         "--target_lang a multi-target folder's direction: give one")  # fmt: skip
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


def translate_documents(translator, batches, args, generate: dict) -> None:
    """--html and --split_sentences: each input line a document whose texts (an HTML fragment's text runs, a
    paragraph's sentences) are translated together and the line rebuilt around their translations, one line out per
    line in. With --html and an engine that aligns, inline markup is placed by the alignment of each sentence
    translated whole (`aayn.translation.markup`); --split_sentences splits by the rules of the source language
    (`aayn.translation.sentences`)."""
    from ..translation.markup import Fragment
    from ..translation.sentences import Sentences

    aligned = args.html and "alignment" in translator.abilities
    if aligned:
        from ..formats.alignment import AlignmentSettings

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


def translate_corpus(translator, args: argparse.Namespace, generate: dict, needs: tuple, options) -> None:
    """--input GLOB_OR_FOLDER --output_dir OUT: each shard without an output translated into one of the same name
    and format (`aayn.translation.bulk`), whole or not at all; a summary line on standard error. `needs` and
    `options`: the abilities and engine options Ray's actors open their translators with."""
    from ..translation.bulk import BulkSettings, shards_of, translate_shards
    from ..translation.targets import language_prefix

    shards = shards_of(args.input)
    settings = BulkSettings(Path(args.output_dir), args.text_field, args.batch_tokens, generate,
                            language_prefix(args.model, args.source_lang, args.target_lang))  # fmt: skip
    if args.ray or args.ray_address:
        from ..translation.bulk_ray import translate_shards_on_ray

        done = translate_shards_on_ray(args.model, args.device, needs, shards, settings, address=args.ray_address,
                                       concurrency=args.concurrency, num_cpus=args.num_cpus_per_worker,
                                       num_gpus=args.num_gpus_per_worker, options=options)  # fmt: skip
    else:
        done = translate_shards(translator, shards, settings, log=lambda line: print(line, file=sys.stderr))
    print(f"{done['shards']} shards ({done['already_done']} already done), {done['lines']} lines translated into "
          f"{done['output_dir']} in {done['seconds']} s", file=sys.stderr)  # fmt: skip


def translate_file(translator, args: argparse.Namespace, generate: dict) -> None:
    """--file IN --output OUT: a document (.txt .html .srt .docx .odt .pptx .odp .epub) translated whole, its
    sentences split by the source language's rules, its formatting kept (`aayn.translation.documents`); OUT written
    whole."""
    from ..folders import staged_file
    from ..translation.documents import read_document

    source = Path(args.file)
    if not source.is_file():
        raise FileNotFoundError(f"--file {args.file}: no such file")
    aligned = "alignment" in translator.abilities
    if aligned:
        from ..formats.alignment import AlignmentSettings

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
    from ..translation.sentences import splitter

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


def language_arguments(parser: argparse.ArgumentParser) -> None:
    """The source language (sentence splitting, a multi-target folder's direction), the target and the pivot."""
    parser.add_argument(
        "--source_lang",
        "--source-lang",
        metavar="CODE",
        help="with --split_sentences or --file: the source language's code (default: the one the folder's card "
        "names); with --target_lang: the direction asked of a lang_pairs folder (a zero-shot one is said)",
    )
    parser.add_argument(
        "--target_lang",
        "--target-lang",
        metavar="CODE",
        help="a multi-target folder's target (OPUS-MT's, or aayn train's lang_pairs): its >>CODE<< token put before "
        "each text",
    )
    parser.add_argument(
        "--pivot",
        metavar="CODE",
        help="with --source_lang and --target_lang of a lang_pairs folder: translate through CODE (two trained "
        "directions) instead of a zero-shot one",
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
    language_arguments(parser)
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
    ray_arguments(parser, "with --input: the shards translated by Ray actors")


TRANSFORMERS = "itself"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = translate, translate_arguments
