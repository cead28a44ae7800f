"""Opening what `--model` names (saved aayn folders, Hub ids, a CTranslate2 folder `aayn export` wrote) as one
`Translator`. Whether a folder is a CTranslate2 export is decided here, once per name: such a folder needs neither
torch nor transformers, so the caller's `setup` (registering aayn with transformers) runs only for the others."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .ct2 import is_ctranslate2_folder
from .translator import Translator


class ModelFolder(NamedTuple):
    """One `--model`: the name as given, where it is (a folder here, or a Hub id) and whether CTranslate2's."""

    name: str
    location: str
    ctranslate2: bool


def locate_model(value: str) -> ModelFolder:
    """--model as given: a saved folder here, or else a Hub id. Names that cannot be a Hub id (absolute or
    relative paths other than `owner/name`) must be folders that exist."""
    from .checks import check_local_name, check_model_folder

    path = Path(value).expanduser()
    if path.is_dir():
        ctranslate2 = is_ctranslate2_folder(path)
        if not ctranslate2:  # CTranslate2 checks its own folders
            check_model_folder(path, "--model")
        return ModelFolder(value, str(path), ctranslate2)
    check_local_name(value, "--model")
    if path.exists() or value.count("/") != 1:
        raise FileNotFoundError(f"--model {value}: no such folder")
    return ModelFolder(value, value, False)


def open_translator(
    names: list[str | ModelFolder],
    device: str = "cpu",
    needs: tuple[str, ...] = (),
    threads: int | None = None,
    setup: Callable[[], None] | None = None,
) -> Translator:
    """The translator of the model folders (or Hub ids) `names` on `device`; `needs`: the `ABILITIES` the caller
    will use, refused here with one line (before any model is loaded where the folder's kind tells). `threads`: the
    CPU threads one model call uses (CTranslate2's `intra_threads`; torch's for this process), else each engine's
    default (all cores). `setup`: called before torch models are loaded (not for a CTranslate2 folder). A name
    may be a `ModelFolder` that `locate_model` gave already."""
    if not names:
        raise ValueError("no --model given")
    folders = [name if isinstance(name, ModelFolder) else locate_model(name) for name in names]
    if any(folder.ctranslate2 for folder in folders):
        return open_exported(folders, device, needs, threads)
    if len(folders) > 1 and set(needs) - {"prefixes"}:
        raise ValueError(f"an ensemble translates (with --prefix too); {' and '.join(needs)}: give one --model")
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
    return TorchTranslator(list(models), tokenizers[0])


def open_exported(folders: list[ModelFolder], device: str, needs: tuple[str, ...], threads: int | None):
    """The CTranslate2 model of `folders` (it translates alone), or one line saying what it cannot do."""
    from .ct2 import ExportedModel

    name = folders[0].name
    if "scores" in needs:
        raise ValueError(
            f"--model {name} is a CTranslate2 model (`aayn export`): give the aayn folder it was exported "
            "from (aayn translate and aayn evaluate take either)"
        )
    if len(folders) > 1 or needs:
        raise ValueError(
            f"--model {name} is a CTranslate2 model: it translates alone, without --prefix or "
            "--show-attention (give the aayn folder it was exported from for those)"
        )
    return ExportedModel(folders[0].location, device, **({"intra_threads": threads} if threads else {}))


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
