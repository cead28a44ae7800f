"""Checks of what a user hands the command line, made before any work is spent: saved model folders (each file
that is missing, empty or damaged is named), devices, and whether a model can fit in memory at all."""

from __future__ import annotations

import json
import os
from pathlib import Path

TRAINING_BYTES_PER_PARAMETER = 16  # float32 weights, gradients and Adam's two moments


def available_cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def safetensors_fault(path: Path) -> str | None:
    """What is wrong with a safetensors file (None: its header parses and its data is all there)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as file:
            head = file.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if length <= 0 or 8 + length > size:
                return "is cut short or not a safetensors file (its header does not fit the file)"
            header = json.loads(file.read(length))
    except (OSError, ValueError, UnicodeDecodeError) as error:
        return f"has an unreadable header ({error})"
    if not isinstance(header, dict):
        return "has an unreadable header (not a JSON object)"
    tensors = [entry for key, entry in header.items() if key != "__metadata__" and isinstance(entry, dict)]
    ends = [entry["data_offsets"][1] for entry in tensors if "data_offsets" in entry]
    if 8 + length + max(ends, default=0) > size:
        return f"is cut short ({size} bytes, its header describes {8 + length + max(ends)})"
    return None


def json_fault(path: Path) -> str | None:
    """What is wrong with a JSON file that must hold an object, or None."""
    if path.stat().st_size == 0:
        return f"{path} is empty"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        return f"{path} is not valid JSON ({error}); was its save cut short?"
    return None if isinstance(value, dict) else f"{path} holds no JSON object"


def looks_local(name: str) -> bool:
    """Whether a model or dataset name means a local path rather than a Hub id: it starts with `.`, `/` or `~`,
    or its parent folder exists here (`runs/x` beside a `runs` folder)."""
    if name.startswith((".", "/", "~")):
        return True
    parent = Path(name).parent
    return str(parent) not in ("", ".") and parent.is_dir()


def check_local_name(name: str, option: str) -> None:
    """A name that looks like a local path must exist: `no such folder` here, not a network error later."""
    if looks_local(name) and not Path(name).expanduser().exists():
        raise FileNotFoundError(f"{option} {name}: no such folder")


# the class names an imported fairseq folder's tokenizer_config.json gives its Python tokenizers
# (`aayn.model.tokenization_fairseq_aayn`; that module imports transformers, these names do not), and their files
MOSES_BPE_TOKENIZER = "FairseqMosesBPETokenizer"
SENTENCEPIECE_UNK_TOKENIZER = "FairseqSentencePieceTokenizer"
PYTHON_TOKENIZER_FILES = {
    MOSES_BPE_TOKENIZER: ["tokenizer_config.json", "vocab-src.json", "vocab-tgt.json"],
    SENTENCEPIECE_UNK_TOKENIZER: ["tokenizer_config.json", "vocab.json"],  # and sentencepiece.model
    "MarianTokenizer": ["tokenizer_config.json", "vocab.json"],  # an imported Marian folder's; and its .spm files
}


def python_tokenizer_class(folder: Path) -> str | None:
    """The class of an imported folder's Python tokenizer (no tokenizer.json: fairseq's, Marian's), or None."""
    path = folder / "tokenizer_config.json"
    if (folder / "tokenizer.json").exists() or not path.is_file() or json_fault(path):
        return None
    name = json.loads(path.read_text(encoding="utf-8")).get("tokenizer_class")
    return name if name in PYTHON_TOKENIZER_FILES else None


def is_moses_bpe_folder(folder: Path) -> bool:
    """Whether `folder`'s tokenizer is an imported fairseq folder's Moses + BPE one (no tokenizer.json)."""
    return python_tokenizer_class(folder) == MOSES_BPE_TOKENIZER


def tokenizer_files(folder: Path) -> list[str]:
    """The JSON files of a saved tokenizer: aayn's tokenizer.json, or an imported fairseq folder's Python tokenizer
    (its config and its dictionaries)."""
    return PYTHON_TOKENIZER_FILES.get(python_tokenizer_class(folder), ["tokenizer.json"])


def check_model_folder(
    folder: str | Path, option: str, *, config: bool = True, weights: bool = True, tokenizer: bool = True
) -> None:
    """A saved model folder whose config, weights and tokenizer can be read, or a ValueError / FileNotFoundError
    naming the file and what is wrong with it. A name that is not a local folder (a Hub id) is left to
    transformers."""
    check_local_name(str(folder), option)
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return
    wanted = (["config.json"] if config else []) + (tokenizer_files(folder) if tokenizer else [])
    for name in wanted:
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"{option} {folder}: no {name} in the folder, so it is no complete saved model")
        fault = json_fault(path)
        if fault:
            raise ValueError(f"{option}: {fault}")
    if weights:
        path = folder / "model.safetensors"
        if not path.is_file():
            if any(folder.glob("model-*.safetensors")) or (folder / "pytorch_model.bin").is_file():
                return  # sharded or older weights: transformers reads and checks them
            raise FileNotFoundError(f"{option} {folder}: no model.safetensors in the folder")
        fault = safetensors_fault(path)
        if fault:
            raise ValueError(f"{option}: {path} {fault}; was its save cut short?")


def check_direction(model: str | Path, source_lang: str, target_lang: str, *, insist: bool = False) -> None:
    """The languages asked for against the direction the model's card records (a folder aayn wrote): scoring an
    en->fr model on fr->en data gives BLEU 0.0 with no other sign. A mismatch is an error, or with `insist` a
    warning naming the model's direction. Folders without an aayn card are not checked."""
    from .cards import card_metadata

    card = card_metadata(model) if Path(model).is_dir() else None
    if card is None or (card["source_lang"], card["target_lang"]) == (source_lang, target_lang):
        return
    direction = f"{card['source_lang']}->{card['target_lang']}"
    if not insist:
        raise ValueError(
            f"--source_lang {source_lang} --target_lang {target_lang}: the model in {model} translates {direction} "
            f"(its model card); pass --source_lang {card['source_lang']} --target_lang {card['target_lang']}, or "
            f"--any_direction to run it on {source_lang}->{target_lang} anyway"
        )
    from transformers.utils import logging

    logging.get_logger("aayn").warning(
        f"the model in {model} translates {direction} (its model card); running it on {source_lang}->{target_lang} "
        "as asked"
    )


def check_device(device: str) -> None:
    """A torch device this machine has, or one line saying why not."""
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"--device {device!r} is no torch device ({error}); e.g. cpu, cuda, cuda:1, mps") from None
    available = {
        "cpu": lambda: True,
        "cuda": lambda: torch.cuda.is_available(),
        "mps": lambda: torch.backends.mps.is_available(),
    }
    if parsed.type == "cuda" and torch.version.cuda is None and not getattr(torch.version, "hip", None):
        raise ValueError(
            f"--device {device}: this torch build ({torch.__version__}) has no CUDA; it runs on cpu"
            + (" and mps" if torch.backends.mps.is_available() else "")
        )
    if parsed.type in available and not available[parsed.type]():
        raise ValueError(f"--device {device}: torch sees no {parsed.type} device on this machine")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def parameter_count(config) -> int:
    """The number of parameters an AaynConfig makes (tied matrices once), counted on the model built on torch's
    meta device: the architecture's own modules, no memory (a model too big to allocate is counted too)."""
    import torch

    from .model.modeling_aayn import AaynForConditionalGeneration

    try:
        with torch.device("meta"):
            model = AaynForConditionalGeneration(config)
    except RuntimeError as error:  # a matrix of more than 2^63 bytes: torch cannot even describe it
        if "overflow" not in str(error):
            raise
        raise ValueError(
            f"the model would have far more parameters than any machine holds (d_model={config.d_model}, "
            f"vocabulary {config.vocab_size}: one weight matrix alone exceeds 2^63 bytes); choose a smaller shape"
        ) from None
    return sum(parameter.numel() for parameter in model.parameters())


def available_memory(device: str) -> int | None:
    """Bytes free for a new model on `device` (None: unknown)."""
    import torch

    parsed = torch.device(device)
    if parsed.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.mem_get_info(parsed)[0]
    if parsed.type != "cpu":
        return None
    import psutil

    return psutil.virtual_memory().available


def check_fits_in_memory(config, device: str) -> None:
    """Refuse a model whose weights, gradients and Adam state alone exceed the memory free on `device`."""
    parameters = parameter_count(config)
    needed = parameters * TRAINING_BYTES_PER_PARAMETER
    free = available_memory(device)
    if free is not None and needed > free:
        raise ValueError(
            f"the model would have {parameters:,} parameters (d_model={config.d_model}, vocabulary "
            f"{config.vocab_size}): training needs at least {needed / 2**30:,.1f} GiB for weights, gradients and "
            f"Adam's state, more than the {free / 2**30:,.1f} GiB free on {device}; choose a smaller shape"
        )
