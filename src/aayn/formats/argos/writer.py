"""`aayn export --format argos`: a model as an Argos Translate package (`.argosmodel`), which LibreTranslate serves.

A package is a zip of one folder: `metadata.json` (language codes and names, `package_version`), `model/` (a
CTranslate2 model: aayn's CTranslate2 export, with the source's `</s>` appended by CTranslate2 itself, as aayn's
tokenizer appends it and Argos's does not), `sentencepiece.model` (Argos tokenizes with it, pieces as tokens) and
the model card as `README.md`. Only a model with a SentencePiece tokenizer (`tokenizer_type: sentencepiece`) can
be packaged: Argos has no byte-level BPE. The zip is written beside its final name and renamed into place
(`aayn.folders.staged_file`).

Argos Translate decodes with CTranslate2 by `ARGOS_SEARCH`: beam 4 (its `ARGOS_BEAM_SIZE` variable changes it)
and `length_penalty=0.2` (CTranslate2's log P / |Y|^0.2), unknown pieces replaced by the source's, at most 256
tokens, weights in the compute type CTranslate2 finds fastest on the machine (`ARGOS_COMPUTE_TYPE=auto`: int8 on
CPUs with its int8 kernels, so outputs may differ from float32's); it splits text into sentences first (MiniSBD or
stanza models) and joins the translations.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from transformers.utils import logging

from ...folders import staged_file
from ...languages import folder_language_tokens, language_name

logger = logging.get_logger(__name__)

ARGOS_SEARCH = {"num_beams": 4, "length_penalty": 0.2}  # what Argos Translate 1.11 passes CTranslate2


def package_metadata(model_dir: Path, source_lang, target_lang, source_name, target_name, version: str) -> dict:
    """metadata.json: the languages from the flags, else the model card's; names from the flags, else the table."""
    from ...cards import card_metadata

    card = card_metadata(model_dir) or {}
    source_lang, target_lang = source_lang or card.get("source_lang"), target_lang or card.get("target_lang")
    if not (source_lang and target_lang):
        raise ValueError(
            f"--model {model_dir} names no languages in its card: give --source_lang and --target_lang (ISO 639)"
        )
    return {
        "package_version": version,
        "argos_version": "1.9",
        "from_code": source_lang,
        "from_name": source_name or language_name(source_lang),
        "to_code": target_lang,
        "to_name": target_name or language_name(target_lang),
        "type": "translate",
        "links": [],
    }


class ArgosSource(NamedTuple):
    """A saved aayn folder read for packaging: everything the package holds, checked."""

    model_dir: Path
    model: object  # AaynForConditionalGeneration
    vocabularies: tuple[list[str], list[str]]
    spm_model: bytes
    metadata: dict

    @property
    def package_name(self) -> str:
        code = self.metadata
        return f"translate-{code['from_code']}_{code['to_code']}-{code['package_version'].replace('.', '_')}"


def argos_source(
    model_dir: Path,
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    source_name: str | None = None,
    target_name: str | None = None,
    package_version: str | None = None,
    quantization: str | None = None,
) -> ArgosSource:
    """The saved aayn folder `model_dir` read and checked for an Argos Translate package (nothing written)."""
    from transformers import AutoTokenizer

    from ...data.tokenizer import sentencepiece_model_of
    from ...model.modeling_aayn import AaynForConditionalGeneration
    from ..ctranslate2.writer import vocabularies

    targets = folder_language_tokens(model_dir)
    if targets:
        raise ValueError(
            f"--model {model_dir} is a multi-target model ({', '.join(sorted(targets.values()))} before the text) and "
            "Argos Translate puts no token before a text: serve it with `aayn serve --model`, which does"
        )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    spm_model = sentencepiece_model_of(tokenizer)
    if spm_model is None:
        raise ValueError(
            f"--model {model_dir} has no SentencePiece model (a byte-level BPE, or Moses + BPE) and Argos Translate "
            "tokenizes with SentencePiece: train the model with `tokenizer_type: sentencepiece` (pip install "
            "'aayn[sentencepiece]') to package it"
        )
    version = package_version or "1.0"
    metadata = package_metadata(model_dir, source_lang, target_lang, source_name, target_name, version)
    model = AaynForConditionalGeneration.from_pretrained(model_dir).eval()
    return ArgosSource(model_dir, model, vocabularies(tokenizer), spm_model, metadata)


def write_package(parts: Path, source: ArgosSource, quantization: str | None = None) -> Path:
    """The package's folder (`source.package_name`) in `parts`, with its CTranslate2 model, SentencePiece model and
    metadata.json; its path."""
    from ...data.tokenizer import SENTENCEPIECE_FILE
    from ..ctranslate2.writer import write_ctranslate2

    package = parts / source.package_name
    (package / "model").mkdir(parents=True)
    tokens, target_tokens = source.vocabularies
    write_ctranslate2(source.model, tokens, package / "model", quantization, target_tokens, source_eos=True)
    (package / SENTENCEPIECE_FILE).write_bytes(source.spm_model)
    (package / "metadata.json").write_text(json.dumps(source.metadata, indent=2) + "\n", encoding="utf-8")
    return package


@contextlib.contextmanager
def zipped_package(output: Path) -> Iterator[Path]:
    """A folder to write the package's folder into, zipped to `output` (beside it, renamed into place) when the
    block ends without error; nothing at `output` otherwise."""
    output.parent.mkdir(parents=True, exist_ok=True)
    parts_folder = tempfile.TemporaryDirectory(prefix=f".{output.name}-", dir=output.parent)
    with staged_file(output) as partial, parts_folder as parts:
        yield Path(parts)
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(Path(parts).rglob("*")):
                archive.write(path, path.relative_to(parts).as_posix())
    logger.info(f"Argos Translate package written to {output}")
