"""Opening what `--model` names (saved aayn folders, Hub ids, folders `aayn export` wrote) as one `Translator`. A
folder's format is decided here, once per name, from `aayn.formats`' registry, which also names the engine that
opens it; the caller's `setup` (registering aayn with transformers) runs only where that engine needs it (not for
a CTranslate2 folder, which needs neither torch nor transformers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .formats import FORMATS, folder_format
from .translator import Translator, without


class ModelFolder(NamedTuple):
    """One `--model`: the name as given, where it is (a folder here, or a Hub id) and its exported format (None:
    an aayn folder or Hub id)."""

    name: str
    location: str
    format: str | None = None


def locate_model(value: str) -> ModelFolder:
    """--model as given: a saved folder here, or else a Hub id. Names that cannot be a Hub id (absolute or
    relative paths other than `owner/name`) must be folders that exist."""
    from .checks import check_local_name, check_model_folder

    path = Path(value).expanduser()
    if path.is_dir():
        exported = folder_format(path)
        if exported is None:  # the engines check their own folders
            check_model_folder(path, "--model")
        return ModelFolder(value, str(path), exported and exported.name)
    check_local_name(value, "--model")
    if path.exists() or value.count("/") != 1:
        raise FileNotFoundError(f"--model {value}: no such folder")
    return ModelFolder(value, value)


def open_translator(
    names: list[str | ModelFolder],
    device: str = "cpu",
    needs: tuple[str, ...] = (),
    threads: int | None = None,
    setup: Callable[[], None] | None = None,
) -> Translator:
    """The translator of the model folders (or Hub ids) `names` on `device`; `needs`: the `ABILITIES` the caller
    will use, refused here with one line (before any model is loaded). `threads`: the CPU threads one model call
    uses (CTranslate2's and ONNX Runtime's intra-op threads; torch's for this process), else each engine's default
    (all cores). `setup`: called before the models are loaded, where their engine uses transformers. A name may be
    a `ModelFolder` that `locate_model` gave already."""
    if not names:
        raise ValueError("no --model given")
    folders = [name if isinstance(name, ModelFolder) else locate_model(name) for name in names]
    exported = next((folder for folder in folders if folder.format), None)
    if exported is not None:
        return open_exported(exported, len(folders), device, needs, threads, setup)
    if len(folders) > 1 and set(needs) - {"prefixes", "glossary"}:
        raise ValueError(
            f"an ensemble translates (with --prefix and --glossary too); {' and '.join(needs)}: give one --model"
        )
    if setup is not None:
        setup()
    from .checks import check_device
    from .translate import TorchTranslator, check_same_tokenizer

    check_device(device)
    if threads:
        import torch

        torch.set_num_threads(threads)
    models, tokenizers = zip(*(load_model(folder, device) for folder in folders))
    check_same_tokenizer(list(tokenizers), [folder.name for folder in folders])
    return TorchTranslator(list(models), tokenizers[0], folders[0].name)


def open_exported(folder: ModelFolder, count: int, device: str, needs: tuple[str, ...], threads: int | None, setup):
    """The engine of an exported folder (it translates alone), or one line saying what it cannot do."""
    entry = FORMATS[folder.format]
    engine = entry.load("engine")
    missing = [need for need in needs if need not in engine.abilities]
    what = f" is {entry.article} {entry.title} model (`aayn export`)"
    if count > 1:
        raise ValueError(f"--model {folder.name}{what}: it translates alone; give the aayn folder it was exported from")
    if missing:
        raise ValueError(without(folder.name, missing[0], what))
    if entry.setup and setup is not None:
        setup()
    return engine(folder.location, device, threads=threads)


def load_model(folder: ModelFolder, device: str):
    """(model in eval mode on `device`, tokenizer) of one `--model`, or one line saying why not."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder.location)
        return AutoModelForSeq2SeqLM.from_pretrained(folder.location).to(device).eval(), tokenizer
    except (OSError, ValueError) as error:
        if Path(folder.location).is_dir():
            raise ValueError(f"cannot load a model from --model {folder.name!r}: {error}") from None
        first = (str(error).strip() or type(error).__name__).splitlines()[0]  # transformers' answers run to lines
        message = f"--model {folder.name}: no such folder here, nor a model of that name on the Hub ({first})"
        raise ValueError(message) from None
