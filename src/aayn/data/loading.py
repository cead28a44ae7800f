"""Parallel corpora in the WMT schema: one column `translation` holding `{source_lang: ..., target_lang: ...}`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import datasets
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict, Features, IterableDataset, IterableDatasetDict, ReadInstruction, Translation
from transformers.utils import logging

from .bible import bible_database, bible_splits

logger = logging.get_logger(__name__)

SPLITS = ("train", "validation", "test")
_FILE_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


def load_translation_dataset(
    name: str,
    config: str | None = None,
    *,
    source_lang: str,
    target_lang: str,
    splits: Mapping[str, str] | None = None,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    max_predict_samples: int | None = None,
    streaming: bool = False,
    cache_dir: str | None = None,
) -> DatasetDict | IterableDatasetDict:
    """Load `train`, `validation` and `test` splits of a parallel corpus, checked, in the WMT schema.

    `name` is a Hub dataset id (`wmt/wmt14`), a local folder laid out like one (a copy of a Hub dataset's files), a
    folder of line-aligned files `{split}.{lang}` or of `{split}.parquet` / `{split}.jsonl` files with a
    `translation` column, or `"bible"` (the embedded corpus, `aayn[bible]`). `config` names the Hub config
    (`de-en`); left out, the one holding both languages is chosen. `splits` maps our split names to the corpus'
    split expressions, with slicing (`{"train": "train[:10%]", "validation": "newstest2013"}`); only the splits it
    names are read (default: all three).
    `max_train_samples` / `max_eval_samples` (validation) / `max_predict_samples` (test) keep the first N examples,
    as in transformers' `run_translation.py`.
    `streaming` (Hub-like sources only) reads the full-size WMT sets without downloading them first.
    """
    if source_lang == target_lang:
        raise ValueError(f"source_lang and target_lang are both {source_lang!r}; a translation pair needs two")
    specs = {split: split for split in SPLITS} if splits is None else dict(splits)
    unknown = set(specs) - set(SPLITS)
    if unknown:
        raise ValueError(f"splits has unknown keys {sorted(unknown)}; allowed: {list(SPLITS)}")
    path = Path(name)
    if name == "bible":
        rows = bible_splits(source_lang, target_lang)
        loaded = {split: _slice(Dataset.from_list(rows[spec.split("[")[0]]), spec) for split, spec in specs.items()}
    elif path.is_dir() and _plain_text_files(path, source_lang, target_lang):
        loaded = {
            split: _slice(_load_line_aligned(path, spec, source_lang, target_lang), spec)
            for split, spec in specs.items()
        }
    elif path.is_dir() and _split_files(path):
        files = _split_files(path)
        loaded = {split: _load_split_file(files, spec, cache_dir) for split, spec in specs.items()}
    elif path.is_file():
        raise ValueError(f"dataset name {name!r} is a file; give the folder that holds the split files")
    else:  # a Hub dataset id or a local folder laid out like one: the same code path
        from ..checks import check_local_name

        check_local_name(name, "dataset")
        config = _resolve_config(name, config, source_lang, target_lang)
        loaded = {
            split: datasets.load_dataset(name, config, split=spec, streaming=streaming, cache_dir=cache_dir)
            for split, spec in specs.items()
        }
    for split, dataset in loaded.items():
        _check(dataset, f"{name} ({split} split {specs[split]!r})", source_lang, target_lang)
        option = {"train": "max_train_samples", "validation": "max_eval_samples", "test": "max_predict_samples"}[split]
        limit = {"train": max_train_samples, "validation": max_eval_samples, "test": max_predict_samples}[split]
        if limit is not None:
            if limit <= 0:
                raise ValueError(f"{option} must be positive, got {limit}")
            loaded[split] = dataset.take(limit) if streaming else dataset.select(range(min(limit, len(dataset))))
    return IterableDatasetDict(loaded) if streaming else DatasetDict(loaded)


def local_split_files(name: str, source_lang: str, target_lang: str) -> Callable[[str], list[Path]] | None:
    """For a corpus aayn reads itself, a function from a split's name to the files its rows come from (empty: none
    there); None for what `datasets.load_dataset` reads (a Hub id, a folder laid out like a Hub dataset)."""
    path = Path(name)
    if name == "bible":
        return lambda split: [bible_database()]
    if path.is_dir() and _plain_text_files(path, source_lang, target_lang):
        return lambda split: [path / f"{split}.{lang}" for lang in (source_lang, target_lang)]
    if path.is_dir() and (files := _split_files(path)):
        return lambda split: [Path(file) for file in files.get(split, [])]
    return None


def _slice(dataset: Dataset, spec: str) -> Dataset:
    """Apply the slice of a split expression like `train[:10%]` to an in-memory split."""
    if "[" not in spec:
        return dataset
    split = spec.split("[")[0]
    instructions = ReadInstruction.from_spec(spec).to_absolute({split: len(dataset)})
    indices = [i for part in instructions for i in range(part.from_, part.to)]
    return dataset.select(indices)


def _plain_text_files(folder: Path, source_lang: str, target_lang: str) -> list[Path]:
    return [
        folder / f"{split}.{lang}"
        for split in SPLITS
        for lang in (source_lang, target_lang)
        if (folder / f"{split}.{lang}").is_file()
    ]


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _line_pairs(source: str, target: str, source_lang: str, target_lang: str, stamp: tuple):
    with open(source, encoding="utf-8") as s, open(target, encoding="utf-8") as t:
        for source_line, target_line in zip(s, t):
            yield {"translation": {source_lang: source_line.rstrip("\r\n"), target_lang: target_line.rstrip("\r\n")}}


def _load_line_aligned(folder: Path, spec: str, source_lang: str, target_lang: str) -> Dataset:
    """`{split}.{lang}` files, line i of one the translation of line i of the other; streamed into an Arrow cache."""
    split = spec.split("[")[0]
    paths = [folder / f"{split}.{lang}" for lang in (source_lang, target_lang)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        languages = sorted({p.suffix[1:] for p in folder.glob(f"{split}.*")})
        raise FileNotFoundError(
            f"split {split!r} needs {' and '.join(missing)}; the folder has {split}.* files for languages {languages}"
        )
    counts = [_count_lines(p) for p in paths]
    if counts[0] != counts[1]:
        raise ValueError(
            f"line-aligned files differ in length: {paths[0]} has {counts[0]} lines, {paths[1]} has {counts[1]}"
        )
    if counts[0] == 0:
        raise ValueError(f"split {split!r} is empty: {paths[0]} and {paths[1]} have no lines")
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                for _ in f:
                    pass
        except UnicodeDecodeError as error:
            raise ValueError(f"{p} is not UTF-8 text: {error}") from error
    stamp = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in paths)  # a changed file is a new cache entry
    return Dataset.from_generator(
        _line_pairs,
        gen_kwargs=dict(
            source=str(paths[0]), target=str(paths[1]), source_lang=source_lang, target_lang=target_lang, stamp=stamp
        ),
        features=Features({"translation": Translation(languages=[source_lang, target_lang])}),
    )


def _split_files(folder: Path) -> dict[str, list[str]]:
    """`{split}.parquet`, `{split}.jsonl`, `{split}-00000-of-00001.parquet`, ... directly inside `folder`."""
    files: dict[str, list[str]] = {}
    for path in sorted(folder.iterdir()):
        split = path.name.split(".")[0].split("-")[0]
        if path.suffix in _FILE_FORMATS and split in SPLITS:
            files.setdefault(split, []).append(str(path))
    return files


def _load_split_file(files: dict[str, list[str]], spec: str, cache_dir: str | None) -> Dataset:
    split = spec.split("[")[0]
    if split not in files:
        raise FileNotFoundError(
            f"no file for split {split!r}; found splits {sorted(files)} "
            f"({[f for split_files in files.values() for f in split_files]})"
        )
    builder = _FILE_FORMATS[Path(files[split][0]).suffix]
    return datasets.load_dataset(builder, data_files={split: files[split]}, split=spec, cache_dir=cache_dir)


def _resolve_config(name: str, config: str | None, source_lang: str, target_lang: str) -> str | None:
    """The config holding the pair, in either direction (`de-en` serves en->de and de->en)."""
    available = datasets.get_dataset_config_names(name)
    if config is not None:
        if available and config not in available and available != ["default"]:
            raise ValueError(f"dataset {name!r} has no config {config!r}; available: {', '.join(available)}")
        return config
    candidates = [c for c in (f"{source_lang}-{target_lang}", f"{target_lang}-{source_lang}") if c in available]
    if candidates:
        return candidates[0]
    if available == ["default"] or len(available) == 1:
        return available[0]
    raise ValueError(
        f"dataset {name!r} has no config for the pair {source_lang}-{target_lang}; available: {', '.join(available)}"
    )


def translation_languages(dataset: Dataset | IterableDataset) -> list[str]:
    """The languages of a split's `translation` column; a streamed split without a schema: its first row's."""
    features = dataset.features
    if features is None and isinstance(dataset, IterableDataset):  # a generator's schema is known once it yields
        first = next(iter(dataset), None)
        return sorted(first["translation"]) if first and isinstance(first.get("translation"), dict) else []
    if features is None or "translation" not in features:
        raise ValueError("needs a split with a `translation` column (the WMT schema)")
    feature = features["translation"]
    return list(feature.languages) if hasattr(feature, "languages") else list(feature)


def _check(dataset: Dataset | IterableDataset, origin: str, source_lang: str, target_lang: str) -> None:
    """Fail where the data enters: schema, languages, empty splits, rows lacking a side."""
    features = dataset.features
    if features is None or "translation" not in features:
        columns = list(features) if features is not None else "unknown (streamed)"
        raise ValueError(f"{origin} has no `translation` column (columns: {columns}); expected the WMT schema")
    languages = translation_languages(dataset)
    for role, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if lang not in languages:
            raise ValueError(f"{role}={lang!r} is not in {origin}; its languages: {', '.join(languages)}")
    if isinstance(dataset, IterableDataset):
        return  # rows are checked as they stream by the preprocessing
    if len(dataset) == 0:
        raise ValueError(f"{origin} is empty")
    column = dataset.data.column("translation")
    for lang in (source_lang, target_lang):
        missing = sum(pc.sum(pc.is_null(pc.struct_field(chunk, lang))).as_py() or 0 for chunk in column.chunks)
        if missing:
            raise ValueError(f"{origin}: {missing} rows have no {lang!r} text")
    blank = 0  # rows with only whitespace on a side, which tokenizing drops
    for chunk in column.chunks:
        sides = [
            pc.equal(pc.utf8_trim_whitespace(pc.struct_field(chunk, lang)), "") for lang in (source_lang, target_lang)
        ]
        blank += pc.sum(pc.or_(*sides)).as_py() or 0
    if blank == len(dataset):
        raise ValueError(f"{origin}: all {blank} rows are blank (only whitespace) on one side or both")
