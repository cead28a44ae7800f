"""§5.1: one BPE vocabulary shared by source and target, trained with the `tokenizers` library."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from datasets import Dataset, IterableDataset
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging

from .loading import translation_languages

logger = logging.get_logger(__name__)

# The ids AaynConfig expects (pad_token_id=0, bos_token_id=1 = decoder_start_token_id, eos_token_id=2); unk follows.
SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def _sentences(
    dataset: Dataset | IterableDataset, languages: tuple[str, ...], batch_size: int, stats: dict
) -> Iterator[list[str]]:
    """Batches of sentences of both languages, read from Arrow batch by batch: no copy of the corpus in Python."""
    for batch in dataset.iter(batch_size=batch_size):
        texts = [row[lang] for row in batch["translation"] for lang in languages]
        stats["sentences"] += len(texts)
        stats["characters"] += sum(map(len, texts))
        yield texts


def train_tokenizer(
    dataset: Dataset | IterableDataset,
    *,
    source_lang: str,
    target_lang: str,
    vocab_size: int = 37000,
    min_frequency: int = 2,
    model_max_length: int = 1024,
    batch_size: int = 1000,
    show_progress: bool = True,
    input_sentence_size: int = 0,
    seed: int = 0,
) -> PreTrainedTokenizerFast:
    """Train a shared byte-level BPE on both sides of `dataset` (a split in the WMT schema), wrapped for transformers.

    NFKC normalizes; the byte-level pre-tokenizer keeps every space, so `decode(encode(text)) == NFKC(text)` and
    no character is ever unknown. `</s>` is appended to every sequence, labels included (`text_target=`). The
    tokenizer saves as a plain `tokenizer.json`, which `AutoTokenizer.from_pretrained` loads without aayn.
    """
    if input_sentence_size < 0:
        raise ValueError(f"input_sentence_size must be >= 0 (0: every sentence), got {input_sentence_size}")
    if vocab_size < 300:
        raise ValueError(f"vocab_size={vocab_size} is too small for byte-level BPE (256 bytes + special tokens)")
    for lang in (source_lang, target_lang):
        if lang not in (languages := translation_languages(dataset)):
            raise ValueError(f"{lang!r} is not a language of the corpus; its languages: {', '.join(languages)}")
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    if input_sentence_size and isinstance(dataset, Dataset) and 2 * len(dataset) > input_sentence_size:
        pairs = max(1, input_sentence_size // 2)
        chosen = np.sort(np.random.default_rng(seed).choice(len(dataset), size=pairs, replace=False))
        logger.info(
            f"training the BPE on {pairs:,} of {len(dataset):,} pairs (input_sentence_size={input_sentence_size:,})"
        )
        dataset = dataset.select(chosen)
    elif input_sentence_size and isinstance(dataset, IterableDataset):  # a stream's length is unknown: a buffered draw
        dataset = dataset.shuffle(seed=seed, buffer_size=10_000).take(max(1, input_sentence_size // 2))
    stats = {"sentences": 0, "characters": 0}
    start = time.perf_counter()
    length = 2 * len(dataset) if isinstance(dataset, Dataset) else None
    tokenizer.train_from_iterator(
        _sentences(dataset, (source_lang, target_lang), batch_size, stats), trainer, length=length
    )
    seconds = time.perf_counter() - start
    eos = SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    logger.info(
        f"trained a {tokenizer.get_vocab_size():,}-token BPE on {stats['sentences']:,} sentences "
        f"({stats['characters'] / 1e6:.1f}M characters) in {seconds:.1f}s: "
        f"{stats['sentences'] / seconds:,.0f} sentences/s, {stats['characters'] / seconds / 1e6:.2f}M characters/s"
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        model_max_length=model_max_length,
        model_input_names=["input_ids", "attention_mask"],
        **SPECIAL_TOKENS,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: str | Path) -> None:
    """`save_pretrained`, made for users of either transformers line and of plain `tokenizers`.

    transformers 5.x names the class `TokenizersBackend` in tokenizer_config.json, which 4.57 cannot load; both
    lines load `PreTrainedTokenizerFast` (5.x keeps it as an alias). The truncation that the last batched call
    set (training's max length) would be saved in tokenizer.json and cut every later `Tokenizer.from_file` user's
    text: it is not part of the tokenizer, so it is cleared (transformers sets it again per call).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)  # none: a Python tokenizer (an imported Moses + BPE)
    if backend is not None:
        backend.no_truncation()
        backend.no_padding()
    tokenizer.save_pretrained(folder)
    path = Path(folder) / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
