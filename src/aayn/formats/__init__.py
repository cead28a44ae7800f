"""The registry of formats aayn reads and writes: CTranslate2, ONNX and Argos Translate out, fairseq in. Each entry
names its writer (or reader), the engine that translates its folders (None: the folder is an aayn folder, or it is
translated elsewhere), the pip extra both need, and how a folder of it is recognized. `aayn export`, `aayn import`
and `aayn.opening` (which engine opens what `--model` names) read this table and nothing else.

Writers and engines are named as "module:attribute" and imported on first use, so reading the table imports none
of them (an `aayn translate` of a CTranslate2 folder loads no torch) and no module imports another through it.
`write_beside_weights` writes what every folder carries beside its weights, one way for every format.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Format:
    name: str
    title: str  # its name in messages
    direction: str  # "out": `aayn export --format NAME`; "in": `aayn import NAME`
    writer: str  # "module:function" writing it (out) or reading it into an aayn folder (in)
    engine: str | None  # "module:Class" translating a folder of it (a `Translator`)
    extra: str  # `pip install 'aayn[EXTRA]'`
    files: tuple[str, ...] = ()  # a folder holding all of these (and no model.safetensors) is of this format
    setup: bool = False  # whether its engine uses transformers (aayn registered first: an imported tokenizer)

    @property
    def article(self) -> str:
        return "an" if self.title[0] in "AEIOU" else "a"

    def load(self, what: str):
        module, _, attribute = getattr(self, what).partition(":")
        return getattr(importlib.import_module(module), attribute)

    def holds(self, folder: Path) -> bool:
        return bool(self.files) and all((folder / name).is_file() for name in self.files)


FORMATS = {
    entry.name: entry
    for entry in (
        Format("ctranslate2", "CTranslate2", "out", "aayn.export:save_ctranslate2_folder", "aayn.ct2:ExportedModel",
               "ct2", ("model.bin",)),
        Format("onnx", "ONNX", "out", "aayn.onnx_export:save_onnx", "aayn.onnx_engine:OnnxTranslator", "onnx",
               ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"), setup=True),
        Format("argos", "Argos Translate", "out", "aayn.argos_export:save_argos", None, "argos"),
        Format("fairseq", "fairseq", "in", "aayn.fairseq_import:import_fairseq", None, "import"),
    )
}  # fmt: skip
EXPORTS = tuple(name for name, entry in FORMATS.items() if entry.direction == "out")
IMPORTS = tuple(name for name, entry in FORMATS.items() if entry.direction == "in")


def folder_format(folder: str | Path) -> Format | None:
    """The exported format whose engine translates `folder`, or None for an aayn (transformers) folder."""
    folder = Path(folder).expanduser()
    if (folder / "model.safetensors").exists():
        return None
    return next((entry for entry in FORMATS.values() if entry.engine and entry.holds(folder)), None)


def export_model(
    model_dir: str | Path,
    output: str | Path,
    format: str = "ctranslate2",
    quantization: str | None = None,
    **package,
) -> Path:
    """A saved aayn folder in another engine's format (`EXPORTS`), written whole or not at all: a folder
    (`output_dir`), or for "argos" a package file; `package` holds an Argos package's languages and version."""
    from .checks import check_model_folder
    from .folders import check_new_folder

    if format not in EXPORTS:
        raise ValueError(f"--format must be one of {EXPORTS}, got {format!r}")
    if not Path(model_dir, "config.json").is_file():
        raise FileNotFoundError(f"--model {model_dir} is not a saved model folder (no config.json)")
    check_model_folder(model_dir, "--model", weights=False, tokenizer=False)
    model_type = json.loads(Path(model_dir, "config.json").read_text(encoding="utf-8")).get("model_type")
    if model_type != "aayn":
        raise ValueError(f"--model {model_dir} holds a {model_type!r} model, not an aayn one: only aayn models export")
    check_model_folder(model_dir, "--model")
    if format != "argos":
        check_new_folder(Path(output))
    writer: Callable[..., Path] = FORMATS[format].load("writer")
    return writer(model_dir, output, quantization=quantization, **package)


def write_beside_weights(folder: Path, model, tokenizer, model_dir: Path | None, *, config: bool = True) -> None:
    """What every folder aayn writes carries beside its weights: the model's config (`config`: where the format
    has no config.json of its own), its generation config (the search `aayn translate` runs), the tokenizer with
    its SentencePiece model as `sentencepiece.model`, the source limit aayn's translation applies (the tokenizer's
    `model_max_length`: the smaller of the tokenizer's and the position table's) and the model card of `model_dir`
    (README.md)."""
    from .data.tokenizer import save_tokenizer
    from .policy_aayn import source_limit

    if config:
        model.config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    settings["model_max_length"] = source_limit(settings.get("model_max_length"), model.config.max_position_embeddings)
    path.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if model_dir is not None and (Path(model_dir) / "README.md").is_file():
        (folder / "README.md").write_bytes((Path(model_dir) / "README.md").read_bytes())
