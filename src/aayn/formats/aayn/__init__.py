"""The aayn folder, aayn's own format: what `save_pretrained` writes (weights, config, generation config, the
model's code, tokenizer, card), or a Hub id of one. Translated by `aayn.formats.aayn.engine.TorchTranslator` with every
ability, one folder or an ensemble of several sharing a tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ..base import Format
from ..translator import ABILITIES, AS_SAVED


class SavedModel(NamedTuple):
    """What an aayn folder is written from: the model, its tokenizer (None: written by someone else) and the
    keywords of its card (`aayn.cards.write_model_card`; None: no card)."""

    model: object
    tokenizer: object = None
    card: dict | None = None


class AaynFolder(Format):
    name, title, direction = "aayn", "aayn", "home"
    files = ("config.json", "model.safetensors")
    abilities = frozenset(ABILITIES)
    ensembles = frozenset({"prefixes", "glossary", "alignment"})  # the models' averaged cross-attention aligns
    engine_class, setup = "TorchTranslator", True
    dtypes = ("float32", "bfloat16", "float16")  # the weights cast on loading (`load_model`)
    cuda_graphs = True  # `generate(cuda_graphs=True)`
    compiled_steps = True  # `generate(compiled_steps=True)`

    def load(self, source: SavedModel, **options) -> SavedModel:
        """An aayn folder is written from a model in memory (trained, averaged, imported): nothing to read."""
        return source

    def write_files(self, staging: Path, loaded: SavedModel, **options) -> None:
        loaded.model.save_pretrained(staging)

    def write_companions(self, staging: Path, loaded: SavedModel, output: Path) -> None:
        card = None if loaded.card is None else {"repo_id": output.name, **loaded.card}
        self.write_into(staging, loaded._replace(card=card), weights=False)

    @staticmethod
    def write_into(folder: Path, saved: SavedModel, *, weights: bool = True) -> None:
        """The folder's files into `folder` as it is (a checkpoint the Trainer writes, a staging folder): the
        weights, config, generation config and code (`weights`: not where the Trainer wrote them already), the
        tokenizer in a form both transformers lines load, and the card."""
        from ...cards import write_model_card
        from ...data.tokenizer import save_tokenizer

        if weights:
            saved.model.save_pretrained(folder)
        if saved.tokenizer is not None:
            save_tokenizer(saved.tokenizer, folder)
        if saved.card is not None:
            write_model_card(folder, saved.model, **saved.card)

    def open(self, locations: list[str], names: list[str], device: str, threads: int | None, options=AS_SAVED):
        from ...checks import check_device

        engine = self.part("engine")
        check_device(device)
        if threads:
            import torch

            torch.set_num_threads(threads)
        loaded = (load_model(location, name, device, options.dtype) for location, name in zip(locations, names))
        models, tokenizers = zip(*loaded)
        engine.check_same_tokenizer(list(tokenizers), names)
        return engine.TorchTranslator(list(models), tokenizers[0], names[0], cuda_graphs=options.cuda_graphs,
                                      compiled_steps=options.compiled_steps)  # fmt: skip


def load_model(location: str, name: str, device: str, dtype: str | None = None):
    """(model in eval mode on `device`, tokenizer) of one `--model` (a folder here or a Hub id), or one line saying
    why not. `dtype` ("bfloat16", ...): the weights cast to it as they move to `device` (None: as loaded, float32
    for the folders aayn writes); the search still ranks in float32."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        model = AutoModelForSeq2SeqLM.from_pretrained(location)
        return model.to(device=device, dtype=getattr(torch, dtype) if dtype else None).eval(), tokenizer
    except (OSError, ValueError) as error:
        if Path(location).is_dir():
            raise ValueError(f"cannot load a model from --model {name!r}: {error}") from None
        first = (str(error).strip() or type(error).__name__).splitlines()[0]  # transformers' answers run to lines
        message = f"--model {name}: no such folder here, nor a model of that name on the Hub ({first})"
        raise ValueError(message) from None
