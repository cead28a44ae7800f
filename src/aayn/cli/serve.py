"""`aayn serve`: models over HTTP (LibreTranslate's API and the Hub's shape), and its `keys` and `suggestions`
verbs."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from .arguments import (
    batch_tokens_argument,
    card_languages,
    device_argument,
    engine_options,
    positive_int,
    prepare_transformers,
)


def serve(args: argparse.Namespace) -> None:
    """Serve saved models (a pair each, or several as an ensemble), CTranslate2 or ONNX exports over HTTP:
    LibreTranslate's API and the Hub's request shape on POST /translate, GET /languages, POST /detect, a page at /;
    concurrent requests are batched by tokens, a batcher per pair."""
    from .. import MissingExtra

    if args.verb and args.verb[0] == "suggestions":
        from ..serve.suggestions import suggestions_command

        return suggestions_command(args.verb, args.suggestions_db_path, args.output)
    if args.verb:
        from ..serve.keys import keys_command

        return keys_command(args.verb, args.api_keys_db_path, args.max_chars, args.key)
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        raise MissingExtra("aayn serve needs starlette and uvicorn: pip install 'aayn[serve]'") from error
    from ..serve import ServeSettings
    from ..serve import serve as run_server
    from ..serve.keys import access_of

    if args.max_wait_ms < 0:
        raise ValueError(f"--max_wait_ms must be >= 0, got {args.max_wait_ms}")
    if bool(args.model) == bool(args.pair):
        raise ValueError("give --model (one direction; repeat it for an ensemble) or --pair SRC:TGT=FOLDER (repeat it)")
    access = access_of(args)
    served = [served_pair(value) for value in args.pair] if args.pair else model_pairs(args.model)
    seen = [(source, target) for source, target, _ in served if source]
    if len(seen) != len(set(seen)):
        raise ValueError(f"--pair serves a direction twice: {sorted(seen)}")
    pairs = served_pairs(args, served)
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


def served_pairs(args: argparse.Namespace, served: list) -> list:
    """The `Pair`s of `served` (source, target, names), each model opened once. A multi-target model (its
    vocabulary has target-language tokens: OPUS-MT's `>>fr<<`) serves one pair per target token under --model, the
    asked target's under --pair; the server puts the token before each text. A model named by several --pair
    is opened once (its pairs share its batcher)."""
    from ..languages import folder_lang_pairs, folder_language_tokens
    from ..serve import Pair
    from ..translation.targets import language_prefix

    pairs, opened = [], {}
    for source, target, names in served:
        tokens = folder_language_tokens(names[0]) if Path(names[0]).is_dir() else {}
        translators = opened.get(tuple(names)) or opened.setdefault(tuple(names), open_served(args, names))
        if not tokens or not source:  # no card's languages: the Hub's shape, the client writes the token
            pairs.append(Pair(source, target, names, translators))
        elif args.pair or folder_lang_pairs(names[0]):  # the asked pair, or each of the folder's own
            if target not in tokens:
                raise ValueError(f"--pair {source}:{target}: {names[0]} has no token for {target} (its targets: "
                                 f"{', '.join(sorted(tokens))})")  # fmt: skip
            pairs.append(Pair(source, target, names, translators, target_token=language_prefix(names, source, target)))
        else:
            for code, token in sorted(tokens.items()):
                if source and code != source:
                    pairs.append(Pair(source, code, names, translators, target_token=token))
    return pairs


def model_pairs(names: list[str]) -> list[tuple[str, str, list[str]]]:
    """What `--model` serves: a multilingual aayn folder's pairs (its config's `lang_pairs`), exactly those; else
    the direction its card names (none: the Hub's shape only)."""
    from ..languages import folder_lang_pairs

    pairs = folder_lang_pairs(names[0]) if Path(names[0]).is_dir() else []
    return [(source, target, names) for source, target in pairs] or [(*card_languages(names), names)]


def served_pair(value: str) -> tuple[str, str, list[str]]:
    """`--pair SRC:TGT=FOLDER` as (source, target, [folder])."""
    languages, _, folder = value.partition("=")
    source, _, target = languages.partition(":")
    if not (source and target and folder) or not (source.isalpha() and target.isalpha()) or source == target:
        raise ValueError(f"--pair {value}: give SRC:TGT=FOLDER with two language codes, e.g. en:fr=runs/demo")
    return source.lower(), target.lower(), [folder]


def open_served(args: argparse.Namespace, names: list[str]) -> list:
    """The translators of one served pair: one in this process, or --workers processes of its own."""
    from ..checks import available_cores
    from ..serve import start_workers
    from ..translation.opening import open_translator

    # CTranslate2 folders need no torch, nor does the server itself where worker processes hold the model
    setup = functools.partial(prepare_transformers, progress_bars=args.verbose)
    if args.workers == 1:
        return [open_translator(names, args.device, threads=args.threads, setup=setup, options=engine_options(args))]
    threads = args.threads or max(1, available_cores() // args.workers)  # sharing the cores unless told otherwise
    return start_workers(names, args.device, args.workers, threads, setup, engine_options(args))


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    from ..serve import ServeSettings  # the server's defaults are the flags'

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


TRANSFORMERS = "itself"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = serve, serve_arguments
