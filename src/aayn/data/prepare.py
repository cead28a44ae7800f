"""Data prepared once, fairseq-preprocess's habit in datasets' Arrow files: the shared BPE and every split's token
ids, each in a folder named by a hash of what decides it, under datasets' cache (`$HF_DATASETS_CACHE/aayn`).

What decides a folder is its content's sources, never a Python object's hash: the bytes of the data files aayn
reads itself (plain `{split}.{lang}` files, parquet / jsonl split files, the embedded Bible), or datasets' own
fingerprint of what it loads (Hub ids, folders laid out like a Hub dataset); `tokenizer.json`'s content; the
length limits. A rerun, a resume (the run's saved tokenizer is the cached one), another run on the same data and
settings and `--tokenizer_name` with the same tokenizer all find the folder and start in seconds without reading
the corpus; a change prepares again and says in one line what changed. A folder is written beside its final name
and renamed into it whole, so a kill leaves nothing that passes for finished. A tokenized folder is a
`DatasetDict.save_to_disk` folder (`datasets.load_from_disk` reads it without aayn) with its tokenizer in
`tokenizer/`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import xxhash
from datasets import DatasetDict
from transformers import AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging

from ..folders import staged_folder
from ..model.policy_aayn import BASE_VOCAB_SIZE, TOKENIZER_TYPE
from .loading import load_translation_dataset, local_split_files
from .preprocess import tokenize_dataset
from .tokenizer import save_tokenizer, train_vocabulary

logger = logging.get_logger(__name__)

FORMAT = 1  # what a prepared folder holds and how aayn reads corpora: a change here prepares everything again
RECORD = "aayn_prepared.json"


def is_recorded(folder: Path) -> bool:
    """Whether another process finished preparing `folder` (the same content: its name is the content's key)."""
    return (folder / RECORD).is_file()


@dataclass(frozen=True)
class DataPlan:
    """What decides the prepared data, as one value: the corpus and the splits read, the tokenizer, the limits."""

    dataset_name: str
    source_lang: str
    target_lang: str
    dataset_config_name: str | None = None
    splits: dict[str, str] = field(default_factory=lambda: {s: s for s in ("train", "validation", "test")})
    max_samples: dict[str, int | None] = field(default_factory=dict)  # split -> keep the first N pairs
    max_source_length: int = 256
    max_target_length: int = 256
    overlong: str = "drop"  # the training split's; validation and test are truncated, as evaluation needs them whole
    vocab_size: int = BASE_VOCAB_SIZE  # a new vocabulary's
    tokenizer_type: str = (
        TOKENIZER_TYPE  # a new vocabulary's kind: byte-level BPE or SentencePiece (aayn.data.tokenizer)
    )
    sentencepiece_model_type: str = "unigram"
    input_sentence_size: int = 2_000_000  # sentences a new BPE reads (0: all)
    tokenizer_name: str | None = None  # a saved tokenizer instead of a new BPE
    source_prefix: str = ""  # before each source text: a multilingual model's target token (`data.multilingual`)

    @property
    def corpus(self) -> str:
        """The corpus and direction, as the cache's folder names start."""
        name = Path(self.dataset_name).name or self.dataset_name
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]
        return f"{safe}-{self.source_lang}-{self.target_lang}"

    def load(self, splits: list[str]) -> DatasetDict:
        return load_translation_dataset(
            self.dataset_name,
            self.dataset_config_name,
            source_lang=self.source_lang,
            target_lang=self.target_lang,
            splits={split: self.splits[split] for split in splits},
            max_train_samples=self.max_samples.get("train"),
            max_eval_samples=self.max_samples.get("validation"),
            max_predict_samples=self.max_samples.get("test"),
        )


@dataclass
class PreparedData:
    """A prepared folder, open: the tokenizer and the tokenized splits (memory-mapped)."""

    folder: Path
    tokenizer: PreTrainedTokenizerBase
    splits: DatasetDict
    new_tokenizer: bool  # a BPE made for this data, which the run saves as its own
    rows: dict[str, list[str]] | None = None  # several pairs: each evaluation split's pair per row, in order


def cache_root() -> Path:
    return Path(datasets.config.HF_DATASETS_CACHE) / "aayn"


def file_digest(path: Path) -> str:
    """xxHash-128 of a file's bytes, read in 16 MB chunks: cheap enough to run at every start (docs/measurements.md)."""
    digest = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def text_digest(value) -> str:
    return xxhash.xxh3_128(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def tokenizer_digest(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of what encodes text: tokenizer.json's content without the truncation and padding a call left set
    (the same tokenizer trained here, saved in a run, or given by `--tokenizer_name` hashes the same)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a tokenizer without a `tokenizers` backend: its vocabulary and class
        return text_digest([type(tokenizer).__name__, sorted(tokenizer.get_vocab().items())])
    content = json.loads(backend.to_str())
    content.pop("truncation", None)
    content.pop("padding", None)
    return text_digest(content)


def split_identities(plan: DataPlan, splits: list[str], raw: Callable[[], DatasetDict]) -> dict[str, str]:
    """Per split, what its rows come from: the digest of the files aayn reads itself, or datasets' fingerprint of
    what `load_dataset` loaded (its key: the Hub revision, or a local file's path, size and time)."""
    files = local_split_files(plan.dataset_name, plan.source_lang, plan.target_lang)
    if files is None:
        loaded = raw()
        return {split: loaded[split]._fingerprint for split in splits}
    identities = {}
    for split in splits:
        paths = files(plan.splits[split].split("[")[0])
        identities[split] = text_digest([file_digest(path) for path in paths]) if paths else "missing"
    return identities


def prepare_data(
    plan: DataPlan,
    splits: list[str],
    *,
    tokenizer: PreTrainedTokenizerBase | None = None,
    num_proc: int | None = None,
    root: Path | None = None,
) -> PreparedData:
    """The tokenizer and the tokenized `splits` of `plan`, from the cache or prepared now (`aayn preprocess`).

    `tokenizer` (a resumed run's own, a model's to fine-tune) replaces `plan.tokenizer_name` and a new BPE.
    """
    root = Path(root or cache_root())
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    loaded: dict[str, DatasetDict] = {}

    def raw() -> DatasetDict:  # the corpus itself, read only when something must be made from it
        if "data" not in loaded:
            loaded["data"] = plan.load(splits)
        return loaded["data"]

    identities = split_identities(plan, splits, raw)
    if tokenizer is None and plan.tokenizer_name:
        tokenizer = AutoTokenizer.from_pretrained(plan.tokenizer_name)
    new_tokenizer = tokenizer is None
    if tokenizer is None:
        tokenizer = _bpe(plan, identities, raw, root)
    name = plan.corpus
    parts = {
        "format": FORMAT,
        "data": {split: [plan.splits[split], plan.max_samples.get(split), identities[split]] for split in splits},
        "tokenizer": tokenizer_digest(tokenizer),
        "max_source_length": plan.max_source_length,
        "max_target_length": plan.max_target_length,
        "overlong": plan.overlong,
    }
    if plan.source_prefix:  # (a one-pair folder's key predates it)
        parts["source_prefix"] = plan.source_prefix
    folder = root / f"data-{name}-{text_digest(parts)[:16]}"
    if not (folder / RECORD).is_file():
        say_what_changed(root, f"data-{name}-", parts)
        with staged_folder(folder, finished_by_another=is_recorded) as staging:
            names = {split: str(staging / f"map-{split}.arrow") for split in splits}
            overlong = {split: plan.overlong if split == "train" else "truncate" for split in splits}
            tokenized = DatasetDict(
                {
                    split: tokenize_dataset(
                        raw()[split],
                        tokenizer,
                        source_lang=plan.source_lang,
                        target_lang=plan.target_lang,
                        max_source_length=plan.max_source_length,
                        max_target_length=plan.max_target_length,
                        overlong=overlong[split],
                        num_proc=num_proc,
                        cache_file_names={split: names[split]},
                        source_prefix=plan.source_prefix,
                    )
                    for split in splits
                }
            )
            tokenized.save_to_disk(str(staging))
            del tokenized  # the worker files are copied into the splits' folders: one copy stays
            for path in staging.glob("map-*.arrow"):
                path.unlink()
            save_tokenizer(tokenizer, staging / "tokenizer")
            write_record(staging, parts, plan)
    prepared = datasets.load_from_disk(str(folder))
    sizes = ", ".join(f"{split} {len(rows):,} pairs" for split, rows in prepared.items())
    logger.info(f"prepared data: {folder} ({sizes}; {time.perf_counter() - start:.1f}s)")
    return PreparedData(folder, tokenizer, prepared, new_tokenizer)


def _bpe(plan: DataPlan, identities: dict[str, str], raw, root: Path) -> PreTrainedTokenizerBase:
    """A shared BPE for the training split, trained once per data and settings."""
    if "train" not in identities:
        raise ValueError("a new BPE is trained on the train split; give --tokenizer_name to test without training")
    name = plan.corpus
    parts = {
        "format": FORMAT,
        "data": [plan.splits["train"], plan.max_samples.get("train"), identities["train"]],
        "vocab_size": plan.vocab_size,
        "input_sentence_size": plan.input_sentence_size,
    }
    if plan.tokenizer_type != TOKENIZER_TYPE:  # (a byte-level BPE's key predates the choice)
        parts["tokenizer_type"] = f"{plan.tokenizer_type} {plan.sentencepiece_model_type}"
    folder = root / f"bpe-{name}-{text_digest(parts)[:16]}"
    if not (folder / RECORD).is_file():
        say_what_changed(root, f"bpe-{name}-", parts)
        tokenizer = train_vocabulary(
            raw()["train"],
            tokenizer_type=plan.tokenizer_type,
            sentencepiece_model_type=plan.sentencepiece_model_type,
            source_lang=plan.source_lang,
            target_lang=plan.target_lang,
            vocab_size=plan.vocab_size,
            input_sentence_size=plan.input_sentence_size,
        )
        with staged_folder(folder, finished_by_another=is_recorded) as staging:
            save_tokenizer(tokenizer, staging)
            write_record(staging, parts, plan)
    else:
        logger.info(f"reusing the BPE in {folder}")
    return AutoTokenizer.from_pretrained(folder)


def write_record(staging: Path, parts: dict, plan: DataPlan) -> None:
    record = {"parts": parts, "plan": asdict(plan), "written": time.strftime("%Y-%m-%d %H:%M:%S")}
    (staging / RECORD).write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")


def _describe(key: str, old, new) -> str:
    if key == "data":
        if isinstance(new, dict):
            changed = sorted(s for s in set(old) | set(new) if old.get(s) != new.get(s))
            return f"the {', '.join(changed)} data"
        return "the training data"
    if key == "tokenizer":
        return "the tokenizer"
    if key == "tokenizer_type":
        return f"tokenizer_type {old or 'bpe'} -> {new or 'bpe'}"
    return f"{key} {old} -> {new}"


def say_what_changed(root: Path, prefix: str, parts: dict) -> None:
    """One line: preparing for the first time, or what differs from the closest folder prepared for this corpus
    (the fewest differing parts; the newest of equals)."""
    kind = "the BPE" if prefix.startswith("bpe-") else "the tokenized data"
    earlier = []
    for path in root.glob(f"{prefix}*/{RECORD}"):
        old = json.loads(path.read_text(encoding="utf-8"))["parts"]
        keys = list(parts) + [key for key in old if key not in parts]
        changes = [_describe(key, old.get(key), parts.get(key)) for key in keys if old.get(key) != parts.get(key)]
        earlier.append((len(changes), -path.stat().st_mtime, changes, path.parent.name))
    if not earlier:
        logger.info(f"preparing {kind} for {prefix[prefix.index('-') + 1 : -1]}: nothing prepared yet")
        return
    _, _, changes, name = min(earlier)
    logger.warning(f"preparing {kind} again ({', '.join(changes)} changed since {name})")
