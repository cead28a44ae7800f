"""What the subcommands share: their argument types and groups (decoding, device, alignment, a format's own), the
user errors reported in one line, logging, and transformers set up once the arguments are known to be good."""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path

from ..formats.translator import DECODING_BATCH_TOKENS
from ..imports import MissingExtra
from ..registration import register


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


def recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """train, preprocess: everything after the command is the recipe parser's (`--help` included)."""
    parser.add_argument("recipe_and_flags", nargs=argparse.REMAINDER, help="RECIPE.yaml [--key value ...]")


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
    parser.add_argument(
        "--sampling",
        action="store_true",
        help="draw each token from the model's distribution "
        "instead of searching (fairseq's --sampling; sampled back-translation, Edunov et al. 2018)",
    )
    parser.add_argument("--sampling_topk", type=int, help="with --sampling: among the K likeliest tokens (0: all)")
    parser.add_argument(
        "--sampling_topp",
        type=float,
        help="with --sampling: within the smallest set of tokens holding P of the probability (1: all)",
    )
    parser.add_argument("--temperature", type=float, help="with --sampling: the distribution's temperature")
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help="with --sampling: where the draws start (a corpus of "
        "shards: each shard's from this seed and its name, so a rerun draws the same text)",
    )
    batch_tokens_argument(parser, "padded source tokens per batch")
    device_argument(parser)


def batch_tokens_argument(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--batch_tokens", type=positive_int, default=DECODING_BATCH_TOKENS, help=text)


def device_argument(parser: argparse.ArgumentParser) -> None:
    from ..formats import HOME

    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps, ...")
    parser.add_argument(
        "--dtype",
        choices=HOME.dtypes,
        help="an aayn folder's weights cast to this type on --device (default: as saved, float32); bfloat16 or "
        "float16 on a GPU (float16 is slow on most CPUs)",
    )
    parser.add_argument(
        "--cuda_graphs",
        action="store_true",
        help="an aayn folder's decoder steps replayed from CUDA graphs (with --device cuda)",
    )
    parser.add_argument(
        "--compiled_steps",
        action="store_true",
        help="an aayn folder's decoder steps compiled by torch.compile: a few graphs of ~10-15 s each on a small "
        "model's first batches, repaid over a corpus or a server's life, not one sentence",
    )


def engine_options(args: argparse.Namespace):
    """How the engine computes (`EngineOptions`), from --dtype, --cuda_graphs and --compiled_steps; CUDA graphs
    need CUDA."""
    from ..formats.translator import EngineOptions

    if args.cuda_graphs and not args.device.startswith("cuda"):
        raise ValueError(f"--cuda_graphs replays the decoder's steps on a GPU: give --device cuda, not {args.device}")
    return EngineOptions(args.dtype, args.cuda_graphs, args.compiled_steps)


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


def ray_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """Ray's flags, for the commands that translate shards on Ray actors (`what`: --ray's help)."""
    parser.add_argument("--ray", action="store_true", help=what)
    parser.add_argument("--ray_address", help="with --ray: an existing cluster's address (default: start a local one)")
    parser.add_argument("--concurrency", type=positive_int, default=1, help="with --ray: actors, each one translator")
    parser.add_argument("--num_cpus_per_worker", type=positive_float, default=1.0, help="with --ray: CPUs each actor "
                        "holds")  # fmt: skip
    parser.add_argument("--num_gpus_per_worker", type=non_negative_float, default=0.0, help="with --ray: GPUs each "
                        "actor holds (with --device cuda; fractions share one)")  # fmt: skip


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


SAMPLING_FLAGS = {"sampling_topk": "top_k", "sampling_topp": "top_p", "temperature": "temperature"}


def generate_options(args: argparse.Namespace) -> dict:
    """The decoding flags a user set (the others come from the model's generation config), `sampling` a
    `Sampling` where --sampling asks for it."""
    from ..formats.translator import Sampling

    options = {name: getattr(args, name) for name in ("num_beams", "length_penalty", "max_new_tokens")
               if getattr(args, name) is not None}  # fmt: skip
    given = {key: getattr(args, flag) for flag, key in SAMPLING_FLAGS.items() if getattr(args, flag) is not None}
    if given and not args.sampling:
        flag = next(flag for flag, key in SAMPLING_FLAGS.items() if key in given)
        raise ValueError(f"--{flag} shapes the draws of --sampling: add --sampling")
    if args.sampling:
        options["sampling"] = Sampling(**given, seed=args.seed)
    return options


def decoded_lines(data: bytes, where: str, first_line: int = 1) -> list[str]:
    """UTF-8 lines of `data` without their ends (decoded here: a C or surrogateescape locale would let undecodable
    bytes through), or ValueError naming the line (`first_line`: the number of the first line of `data`)."""
    try:
        return [line.rstrip("\r") for line in data.decode("utf-8").split("\n")]
    except UnicodeDecodeError as error:
        line = first_line + data.count(b"\n", 0, error.start)
        column = error.start - data.rfind(b"\n", 0, error.start)
        raise ValueError(f"{where} line {line} is not UTF-8 text ({error.reason} at byte {column})") from None


def read_lines(path: str, flag: str) -> list[str]:
    """The lines of a UTF-8 text file, without their line ends; `-` is standard input."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag} {path}: no such file") from None
    lines = decoded_lines(data, f"{flag} {path}")
    return lines[:-1] if lines and lines[-1] == "" else lines  # the newline that ends the last line


def card_languages(names: list[str]) -> tuple[str | None, str | None]:
    """The direction the first --model's card names (None, None where it names none: the Hub's shape only)."""
    from ..cards import card_metadata

    card = card_metadata(names[0]) if Path(names[0]).is_dir() else None
    return (card["source_lang"], card["target_lang"]) if card else (None, None)


def format_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The output options and each format's own arguments (`Format.arguments`), one flag each whatever the number
    of formats that declare it (each format checks its own values)."""
    from ..formats import FORMATS

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


def declared_arguments(command: str) -> dict[str, list]:
    """{flag: [(format name, its argparse keywords), ...]} of the formats `aayn COMMAND` writes."""
    from ..formats import FORMATS

    direction = {"export": "out", "import": "in"}[command]
    flags: dict[str, list] = {}
    for name, entry in FORMATS.items():
        if entry.direction == direction:
            for flag, keywords in entry.arguments.items():
                flags.setdefault(flag, []).append((name, keywords))
    return flags


def format_options(args: argparse.Namespace, entry, command: str) -> dict:
    """The arguments given that the format declares, as keywords of its `write`; one line for an argument given
    that belongs to other formats only."""
    from ..formats import FORMATS

    options = {}
    for flag in declared_arguments(command):
        key, value = flag[2:], getattr(args, flag[2:])
        if flag in entry.arguments:
            options[key] = value
        elif value is not None:
            owners = [name for name, other in FORMATS.items() if flag in other.arguments]
            raise ValueError(f"{flag} is an argument of {' and '.join(owners)}, not of {args.format}")
    return options
