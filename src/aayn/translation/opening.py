"""Opening what `--model` names (saved aayn folders, Hub ids, folders `aayn export` wrote, any registered format's)
as one `Translator`. A folder's format is decided here, once per name, from `aayn.formats`' registry; the format
opens it with its engine, and the caller's `setup` (registering aayn with transformers) runs only where that engine
needs it (not for a CTranslate2 folder, which needs neither torch nor transformers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ..formats import FORMATS, HOME, folder_format
from ..formats.translator import ABILITIES, AS_SAVED, EngineOptions, Translator, without


class ModelFolder(NamedTuple):
    """One `--model`: the name as given, where it is (a folder here, or a Hub id) and its format's name."""

    name: str
    location: str
    format: str = HOME.name


def locate_model(value: str) -> ModelFolder:
    """--model as given: a saved folder here, or else a Hub id. Names that cannot be a Hub id (absolute or
    relative paths other than `owner/name`) must be folders that exist."""
    from ..checks import check_local_name, check_model_folder

    path = Path(value).expanduser()
    if path.is_dir():
        found = folder_format(path)
        if found is HOME:  # the other engines check their own folders
            check_model_folder(path, "--model")
        return ModelFolder(value, str(path), found.name)
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
    options: EngineOptions = AS_SAVED,
) -> Translator:
    """The translator of the model folders (or Hub ids) `names` on `device`; `needs`: the `ABILITIES` the caller
    will use, refused here with one line (before any model is loaded). `threads`: the CPU threads one model call
    uses (CTranslate2's and ONNX Runtime's intra-op threads; torch's for this process), else each engine's default
    (all cores). `setup`: called before the models are loaded, where their engine uses transformers. A name may be
    a `ModelFolder` that `locate_model` gave already. `options`: how the engine computes (`EngineOptions`: the
    weights' type, CUDA graphs), where the folders' engine offers it."""
    entry, folders = translator_format(names, needs, options)
    if entry.setup and setup is not None:
        setup()
    locations, given = [folder.location for folder in folders], [folder.name for folder in folders]
    return entry.open(locations, given, device, threads, options)


def translator_format(names: list[str | ModelFolder], needs: tuple[str, ...] = (), options: EngineOptions = AS_SAVED):
    """(the format, the located folders) that `open_translator` opens `names` with, after every check that needs
    no model loaded: the folders (or Hub ids) are there, they translate together, their engine has `needs` and
    computes as `options` ask."""
    if not names:
        raise ValueError("no --model given")
    folders = [name if isinstance(name, ModelFolder) else locate_model(name) for name in names]
    entry = FORMATS[next((folder.format for folder in folders if folder.format != HOME.name), HOME.name)]
    if len(folders) > 1 and entry.ensembles is None:
        other = next(folder for folder in folders if folder.format == entry.name)
        raise ValueError(
            f"--model {other.name}{entry.described}: it translates alone; give the aayn folder it was exported from"
        )
    if len(folders) > 1 and set(needs) - entry.ensembles:
        allowed = " and ".join(how for ability, how in ABILITIES.items() if ability in entry.ensembles)
        raise ValueError(f"an ensemble translates (with {allowed} too); {' and '.join(needs)}: give one --model")
    missing = [need for need in needs if need not in entry.abilities]
    if missing:
        raise ValueError(without(folders[0].name, missing[0], entry.described))
    check_options(options, entry, folders[0].name)
    return entry, folders


def check_options(options: EngineOptions, entry, name: str) -> None:
    """`options` that the format `entry` of `--model name` does not offer, refused in one line."""
    dtype = options.dtype
    if dtype is not None and dtype not in entry.dtypes:
        if not entry.dtypes:
            raise ValueError(f"--dtype {dtype}: --model {name}{entry.described}, which computes in the type it was "
                             "written in; --dtype casts an aayn folder's weights")  # fmt: skip
        raise ValueError(f"--dtype {dtype}: --model {name} computes in {' or '.join(entry.dtypes)}")
    for flag, does in (("cuda_graphs", "replays"), ("compiled_steps", "compiles")):
        if getattr(options, flag) and not getattr(entry, flag):
            raise ValueError(f"--{flag}: --model {name}{entry.described}, whose engine runs its own steps; "
                             f"--{flag} {does} an aayn folder's decoder steps")  # fmt: skip
