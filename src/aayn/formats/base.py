"""`Format`: one kind of model folder (or file) that aayn writes, reads or translates, as CTranslate2's converters
are one `Converter` each: what a format declares (its name, its command-line arguments, whether it writes a folder
or a file, how a folder of it is recognized, what its engine can do) and one template, `write`, through which every
format is written: the output checked, the source read and checked (`load`: before anything is written), the
format's own files and then its companions written into a staging folder, and the whole put in place at once or
not at all. A format module imports its heavy libraries (torch, transformers, CTranslate2, ONNX Runtime) inside
the methods that need them, so reading the registry imports none of them."""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Iterator
from pathlib import Path

from ..folders import check_new_folder, staged_folder


class Format:
    """One format. Subclasses set the class attributes and implement `load` and `write_files` (formats aayn writes);
    a format aayn translates names its engine's class (`engine_class`); the rest has defaults.

    A format is a package (`aayn/formats/<name>/`): this declaration in its `__init__`, its writer and its engine in
    modules beside it (`part`), imported on first use. The writer and the engine read the format's facts from the
    declaration (its files, abilities, name); the declaration reaches them by name only, so the registry imports
    neither, and each fact is stated once."""

    name: str = ""  # `aayn export --format NAME`, `aayn import NAME`, what /health and messages call it
    title: str = ""  # its name in messages ("CTranslate2")
    direction: str = "out"  # "out": `aayn export`; "in": `aayn import`; "home": the aayn folder itself
    extra: str | None = None  # `pip install 'aayn[EXTRA]'` for its writer and engine
    writes: str = "folder"  # what `write` makes: a "folder" (--output_dir) or a "file" (--output)
    output_metavar: str = "DIR"  # what the output option names, in messages
    source_help: str = ""  # for an import: what its source is
    files: tuple[str, ...] = ()  # a folder holding all of these is of this format
    abilities: frozenset = frozenset()  # what its engine does beyond translating (`translator.ABILITIES`)
    ensembles: frozenset | None = None  # None: one folder translates alone; else the abilities of an ensemble
    engine_class: str | None = None  # its engine: a class of the `engine` module beside it (None: not translated)
    setup: bool = False  # whether its engine uses transformers (aayn registered first)
    devices: tuple[str, ...] = ("cpu", "cuda")  # the device kinds its engine translates on
    dtypes: tuple[str, ...] = ()  # the types its engine casts the weights to (`--dtype`); none: the folder's own
    cuda_graphs: bool = False  # whether its engine replays its decoder steps from CUDA graphs (`--cuda_graphs`)
    compiled_steps: bool = False  # whether its engine compiles its decoder steps (`--compiled_steps`)
    # its own command-line arguments beside --model and the output: {"--flag": argparse keyword arguments}
    arguments: dict[str, dict] = {}

    @property
    def article(self) -> str:
        return "an" if self.title[0] in "AEIOU" else "a"

    @property
    def output_option(self) -> str:
        return "--output_dir" if self.writes == "folder" else "--output"

    @property
    def translates(self) -> bool:
        """Whether aayn translates a folder of it (it has an engine), known without importing the engine."""
        return self.engine_class is not None or type(self).engine is not Format.engine

    def part(self, name: str):
        """The module `name` (its "writer", "reader" or "engine") of the format's own package, imported now."""
        return importlib.import_module(f"{type(self).__module__}.{name}")

    @property
    def described(self) -> str:
        """What a folder of it is, in a message about `--model NAME`."""
        return "" if self.direction == "home" else f" is {self.article} {self.title} model (`aayn export`)"

    # -- reading and translating

    def holds(self, path: Path) -> bool:
        """Whether `path` is a folder of this format."""
        return bool(self.files) and all((path / name).is_file() for name in self.files)

    def engine(self):
        """The `aayn.formats.translator.Translator` class translating a folder of it (imported here, not before),
        or None where aayn does not translate it."""
        return getattr(self.part("engine"), self.engine_class) if self.engine_class else None

    def runs_here(self, device: str, quantization: str | None = None) -> bool:
        """Whether its engine is installed and translates on `device` a folder written with `quantization`."""
        return self.translates and device.split(":")[0] in self.devices

    def requantize(self, exported: Path, output: Path, quantization: str) -> Path | None:
        """`exported` (a folder of it, float32) copied to `output` with `quantization`'s weights, where the format
        can do so without being written again (None: it cannot; write it again)."""
        return None

    def open(self, locations: list[str], names: list[str], device: str, threads: int | None, options=None):
        """The translator of the folders `locations` (as `names` gave them) on `device`; one unless `ensembles`;
        `options` (`translator.EngineOptions`): only what the format offers, checked by the caller."""
        return self.engine()(locations[0], device, threads=threads)

    # -- writing: the template

    def write(self, source: str | Path, output: str | Path, **options) -> Path:
        """`source` (an aayn folder; for an import, the other framework's model) written as this format to `output`:
        every check first, then one staging folder, put in place whole or not at all."""
        output = Path(output).expanduser()
        self.check_output(output)
        loaded = self.load(source, **options)
        with self.staged(output) as staging:
            self.write_files(staging, loaded, **options)
            self.write_companions(staging, loaded, output)
        return output

    def check_output(self, output: Path) -> None:
        """Nothing of the user's is replaced: a new (or empty) folder, or a new file."""
        if self.writes == "folder":
            check_new_folder(output, self.output_option)
        elif output.exists():
            raise FileExistsError(f"{self.output_option} {output} exists; give a new file")

    def load(self, source, **options):
        """Everything `write_files` and `write_companions` need, read from `source` (a path, for the formats read
        from disk) and checked: a mistake is found here, before anything is written."""
        raise NotImplementedError

    @contextlib.contextmanager
    def staged(self, output: Path) -> Iterator[Path]:
        """The folder to write into, put in place as `output` when the block ends without error."""
        with staged_folder(output) as staging:
            yield staging

    def write_files(self, staging: Path, loaded, **options) -> None:
        """The format's own files into `staging`."""
        raise NotImplementedError

    def write_companions(self, staging: Path, loaded, output: Path) -> None:
        """What the folder carries beside its own files (`aayn.formats.companions`); written once, here."""


def aayn_source(model_dir: str | Path) -> Path:
    """`model_dir` checked as a saved aayn model folder that an export can read, or one line saying why not."""
    from ..checks import check_model_folder

    model_dir = Path(model_dir).expanduser()
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"--model {model_dir} is not a saved model folder (no config.json)")
    check_model_folder(model_dir, "--model", weights=False, tokenizer=False)
    model_type = json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("model_type")
    if model_type != "aayn":
        raise ValueError(f"--model {model_dir} holds a {model_type!r} model, not an aayn one: only aayn models export")
    check_model_folder(model_dir, "--model")
    return model_dir
