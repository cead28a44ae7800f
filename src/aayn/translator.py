"""One way to translate: a model folder opened as a `Translator`, whatever it holds.

`open_translator(names, device)` opens saved aayn folders (one: a model; several: an ensemble, sharing one
tokenizer) as a `TorchTranslator`, or a CTranslate2 folder that `aayn export` wrote as `ct2.ExportedModel` (without
importing torch). Both answer `nbest(texts, nbest, batch_tokens=..., num_beams=..., length_penalty=...,
max_new_tokens=..., prefixes=..., progress=...)`: per input, in input order, the best hypotheses as (score, text),
batched by tokens and sorted by length (`data.token_batches`); `translate` gives the best texts. `aayn translate`,
`aayn score`, `aayn evaluate` and the benchmark use it; what a kind of model cannot do (a CTranslate2 model: target
prefixes, attention, scores; an ensemble: attention) is refused when it is opened, naming the folder.
"""

from __future__ import annotations

from pathlib import Path

# what a caller may ask of a translator beyond translating: target prefixes, drawing attention, scoring pairs
ABILITIES = ("prefixes", "attention", "scores")


class Translator:
    """n-best translations of texts. Subclasses implement `nbest`; `abilities` says what else they do."""

    abilities: frozenset = frozenset()

    def nbest(self, texts: list[str], nbest: int = 1, **options) -> list[list[tuple[float, str]]]:
        raise NotImplementedError

    def translate(self, texts: list[str], **options) -> list[str]:
        """The best translation of each text, in input order (an empty or blank line: an empty line)."""
        return [hypotheses[0][1] for hypotheses in self.nbest(texts, 1, **options)]


class TorchTranslator(Translator):
    """Saved aayn models (one, or an ensemble sharing its tokenizer) on a torch device: the paper's search
    (`generate`, `generate_ensemble`), with target prefixes; one model also scores pairs and draws attention."""

    def __init__(self, models: list, tokenizer):
        self.models, self.tokenizer = list(models), tokenizer
        self.model = self.models[0]
        self.abilities = frozenset(ABILITIES if len(self.models) == 1 else ("prefixes",))

    def nbest(self, texts: list[str], nbest: int = 1, **options) -> list[list[tuple[float, str]]]:
        from .translate import nbest_translations

        model = self.model if len(self.models) == 1 else self.models
        return nbest_translations(model, self.tokenizer, texts, nbest, **options)

    def score(self, sources: list[str], targets: list[str], **options) -> list:
        """`scoring.score_texts` of the pairs with this model."""
        from .scoring import score_texts

        return score_texts(self.model, self.tokenizer, sources, targets, **options)

    def plot_cross_attention(self, text: str, path: str, **options) -> str:
        from .translate import plot_cross_attention

        return plot_cross_attention(self.model, self.tokenizer, text, path, **options)


def progress_bar(total: int, description: str | None):
    """A progress bar over `total` sentences on stderr, shown once the work has taken a second (None: no bar)."""
    if description is None:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit=" sentences", delay=1.0, leave=False)


def open_translator(
    names: list[str], device: str = "cpu", needs: tuple[str, ...] = (), threads: int | None = None
) -> Translator:
    """The translator of the model folders (or Hub ids) `names` on `device`; `needs`: the `ABILITIES` the caller
    will use, refused here with one line (before any model is loaded where the folder's kind tells). `threads`: the
    CPU threads one model call uses (CTranslate2's `intra_threads`; torch's for this process), else each engine's
    default (all cores)."""
    from .ct2 import ExportedModel, is_ctranslate2_folder

    names = list(names)
    if not names:
        raise ValueError("no --model given")
    locations = [model_location(name) for name in names]
    if any(is_ctranslate2_folder(location) for location in locations):  # what `aayn export` wrote: no torch needed
        if "scores" in needs:
            raise ValueError(
                f"--model {names[0]} is a CTranslate2 model (`aayn export`): give the aayn folder it was exported "
                "from (aayn translate and aayn evaluate take either)"
            )
        if len(names) > 1 or needs:
            raise ValueError(
                f"--model {names[0]} is a CTranslate2 model: it translates alone, without --prefix or "
                "--show-attention (give the aayn folder it was exported from for those)"
            )
        return ExportedModel(locations[0], device, **({"intra_threads": threads} if threads else {}))
    if len(names) > 1 and set(needs) - {"prefixes"}:
        raise ValueError(f"an ensemble translates (with --prefix too); {' and '.join(needs)}: give one --model")
    from .checks import check_device
    from .translate import check_same_tokenizer

    check_device(device)
    if threads:
        import torch

        torch.set_num_threads(threads)
    models, tokenizers = zip(*(load_model(name, location, device) for name, location in zip(names, locations)))
    check_same_tokenizer(list(tokenizers), names)
    return TorchTranslator(list(models), tokenizers[0])


def load_model(name: str, location: str, device: str):
    """(model in eval mode on `device`, tokenizer) of `--model name` (at `location`), or one line saying why not."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        return AutoModelForSeq2SeqLM.from_pretrained(location).to(device).eval(), tokenizer
    except (OSError, ValueError) as error:
        if Path(location).is_dir():
            raise ValueError(f"cannot load a model from --model {name!r}: {error}") from None
        first = (str(error).strip() or type(error).__name__).splitlines()[0]  # transformers' answers run to lines
        message = f"--model {name}: no such folder here, nor a model of that name on the Hub ({first})"
        raise ValueError(message) from None


def model_location(value: str) -> str:
    """--model as given: a saved folder here, or else a Hub id. Names that cannot be a Hub id (absolute or
    relative paths other than `owner/name`) must be folders that exist."""
    from .checks import check_local_name, check_model_folder
    from .ct2 import is_ctranslate2_folder

    path = Path(value).expanduser()
    if path.is_dir():
        if not is_ctranslate2_folder(path):  # CTranslate2 checks its own folders
            check_model_folder(path, "--model")
        return str(path)
    check_local_name(value, "--model")
    if path.exists() or value.count("/") != 1:
        raise FileNotFoundError(f"--model {value}: no such folder")
    return value
