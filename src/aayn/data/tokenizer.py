"""§5.1: one vocabulary shared by source and target: a byte-level BPE trained with the `tokenizers` library (the
default), or a SentencePiece model (unigram or BPE) trained with the `sentencepiece` library, the tokenizer of
Marian / OPUS-MT, Argos Translate and NLLB. Either is saved as a `tokenizer.json` that transformers loads alone."""

from __future__ import annotations

import io
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from datasets import Dataset, IterableDataset
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging

from ..model.policy_aayn import BASE_VOCAB_SIZE, MAX_POSITIONS, TOKENIZER_TYPE
from .loading import translation_languages

logger = logging.get_logger(__name__)

TOKENIZER_TYPES = (TOKENIZER_TYPE, "sentencepiece")  # byte-level BPE (tokenizers), SentencePiece (sentencepiece)
SENTENCEPIECE_TYPES = ("unigram", "bpe")
SENTENCEPIECE_FILE = "sentencepiece.model"  # saved beside tokenizer.json (Argos Translate packages need it)

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


def check_languages(dataset: Dataset | IterableDataset, source_lang: str, target_lang: str) -> None:
    for lang in (source_lang, target_lang):
        if lang not in (languages := translation_languages(dataset)):
            raise ValueError(f"{lang!r} is not a language of the corpus; its languages: {', '.join(languages)}")


def training_sample(dataset: Dataset | IterableDataset, input_sentence_size: int, seed: int):
    """The pairs a new vocabulary reads: both sides of a seeded random sample of `input_sentence_size / 2` pairs
    (0: all), the same for either kind of tokenizer."""
    if input_sentence_size and isinstance(dataset, Dataset) and 2 * len(dataset) > input_sentence_size:
        pairs = max(1, input_sentence_size // 2)
        chosen = np.sort(np.random.default_rng(seed).choice(len(dataset), size=pairs, replace=False))
        logger.info(
            f"training the vocabulary on {pairs:,} of {len(dataset):,} pairs "
            f"(input_sentence_size={input_sentence_size:,})"
        )
        return dataset.select(chosen)
    if input_sentence_size and isinstance(dataset, IterableDataset):  # a stream's length is unknown: a buffered draw
        return dataset.shuffle(seed=seed, buffer_size=10_000).take(max(1, input_sentence_size // 2))
    return dataset


def train_tokenizer(
    dataset: Dataset | IterableDataset,
    *,
    source_lang: str,
    target_lang: str,
    vocab_size: int = BASE_VOCAB_SIZE,
    min_frequency: int = 2,
    model_max_length: int = MAX_POSITIONS,
    batch_size: int = 1000,
    show_progress: bool = True,
    input_sentence_size: int = 0,
    seed: int = 0,
    language_tokens: tuple[str, ...] = (),
) -> PreTrainedTokenizerFast:
    """Train a shared byte-level BPE on both sides of `dataset` (a split in the WMT schema), wrapped for transformers;
    `language_tokens` (a multilingual model's `>>fr<<`) are special tokens after `<unk>`, never split.

    NFKC normalizes; the byte-level pre-tokenizer keeps every space, so `decode(encode(text)) == NFKC(text)` and
    no character is ever unknown. `</s>` is appended to every sequence, labels included (`text_target=`). The
    tokenizer saves as a plain `tokenizer.json`, which `AutoTokenizer.from_pretrained` loads without aayn.
    """
    if input_sentence_size < 0:
        raise ValueError(f"input_sentence_size must be >= 0 (0: every sentence), got {input_sentence_size}")
    if vocab_size < 300:
        raise ValueError(f"vocab_size={vocab_size} is too small for byte-level BPE (256 bytes + special tokens)")
    check_languages(dataset, source_lang, target_lang)
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[*SPECIAL_TOKENS.values(), *language_tokens],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    dataset = training_sample(dataset, input_sentence_size, seed)
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
        **({"additional_special_tokens": list(language_tokens)} if language_tokens else {}),
    )


def train_sentencepiece(
    dataset: Dataset | IterableDataset,
    *,
    source_lang: str,
    target_lang: str,
    vocab_size: int = BASE_VOCAB_SIZE,
    model_type: str = "unigram",
    model_max_length: int = MAX_POSITIONS,
    batch_size: int = 1000,
    input_sentence_size: int = 0,
    seed: int = 0,
    language_tokens: tuple[str, ...] = (),
) -> PreTrainedTokenizerFast:
    """Train one shared SentencePiece model (`unigram` or `bpe`) on both sides of the same sample a BPE reads, with
    aayn's special ids (`<pad>` 0, `<s>` 1, `</s>` 2, `<unk>` 3) and every character of the sample covered; wrapped
    for transformers by transformers' own SentencePiece converter, `</s>` appended as the BPE's is. The model's
    bytes travel with the tokenizer (`sentencepiece_model`) and are saved beside it as `sentencepiece.model`.
    `language_tokens` (a multilingual model's `>>fr<<`) are the model's user-defined pieces after `<unk>`, and
    special tokens of the wrapped tokenizer, never split, as the BPE's are."""
    try:
        import sentencepiece
    except ImportError as error:
        from .. import MissingExtra

        raise MissingExtra("tokenizer_type: sentencepiece needs pip install 'aayn[sentencepiece]'") from error
    if model_type not in SENTENCEPIECE_TYPES:
        raise ValueError(f"sentencepiece_model_type={model_type!r}; allowed: {', '.join(SENTENCEPIECE_TYPES)}")
    if input_sentence_size < 0:
        raise ValueError(f"input_sentence_size must be >= 0 (0: every sentence), got {input_sentence_size}")
    from ..checks import available_cores

    check_languages(dataset, source_lang, target_lang)
    stats = {"sentences": 0, "characters": 0}
    batches = _sentences(
        training_sample(dataset, input_sentence_size, seed), (source_lang, target_lang), batch_size, stats
    )
    model = io.BytesIO()
    start = time.perf_counter()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=(text for batch in batches for text in batch if text.strip()),
            model_writer=model, model_type=model_type, vocab_size=vocab_size, character_coverage=1.0,
            pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="<pad>", bos_piece="<s>", eos_piece="</s>",
            unk_piece="<unk>", input_sentence_size=0, num_threads=available_cores(), minloglevel=2,
            hard_vocab_limit=False,  # as a BPE: at most vocab_size pieces, fewer where the sample has fewer
            user_defined_symbols=list(language_tokens),
        )  # fmt: skip
    except RuntimeError as error:  # a vocab_size it cannot make (below the characters it must cover, say)
        raise ValueError(f"vocab_size={vocab_size}: SentencePiece says {error}") from None
    seconds = time.perf_counter() - start
    pieces = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()
    if pieces < vocab_size:
        logger.warning(
            f"the sample gave a SentencePiece model of {pieces:,} pieces, fewer than vocab_size={vocab_size:,}"
        )
    logger.info(
        f"trained a {pieces:,}-piece SentencePiece {model_type} model on {stats['sentences']:,} sentences "
        f"({stats['characters'] / 1e6:.1f}M characters) in {seconds:.1f}s"
    )
    return fast_tokenizer_of_sentencepiece(model.getvalue(), model_max_length, language_tokens)


def train_vocabulary(
    dataset: Dataset | IterableDataset, *, tokenizer_type: str, sentencepiece_model_type: str = "unigram", **options
) -> PreTrainedTokenizerFast:
    """A new vocabulary of the kind `tokenizer_type` names (`TOKENIZER_TYPES`): `train_tokenizer`'s byte-level BPE
    or `train_sentencepiece`'s model, `options` the same for either."""
    if tokenizer_type == TOKENIZER_TYPE:
        return train_tokenizer(dataset, **options)
    return train_sentencepiece(dataset, model_type=sentencepiece_model_type, **options)


def fast_tokenizer_of_sentencepiece(
    model: bytes, model_max_length: int = MAX_POSITIONS, language_tokens: tuple[str, ...] = ()
) -> PreTrainedTokenizerFast:
    """A SentencePiece model (aayn's special ids) as transformers' fast tokenizer, `</s>` appended; the model's
    `language_tokens` special."""
    from ..model.compat_aayn import sentencepiece_backend

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, SENTENCEPIECE_FILE)
        path.write_bytes(model)
        backend = sentencepiece_backend(str(path))
    specials = list(SPECIAL_TOKENS.values())
    if [backend.id_to_token(i) for i in range(len(specials))] != ["<pad>", "<s>", "</s>", "<unk>"]:
        raise ValueError("the SentencePiece model does not have aayn's special pieces <pad> <s> </s> <unk> as ids 0-3")
    backend.add_special_tokens([*specials, *language_tokens])
    eos = SPECIAL_TOKENS["eos_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, backend.token_to_id(eos))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, model_max_length=model_max_length,
        model_input_names=["input_ids", "attention_mask"], **SPECIAL_TOKENS,
        **({"additional_special_tokens": list(language_tokens)} if language_tokens else {}),
    )  # fmt: skip
    tokenizer.sentencepiece_model = model
    return tokenizer


def sentencepiece_model_of(tokenizer) -> bytes | None:
    """The SentencePiece model a tokenizer was made from: trained in this process, or saved beside the tokenizer
    in the local folder it was loaded from, or the source side's of a tokenizer with one a side (`spm_files`:
    Marian's source.spm, target.spm); None for a byte-level BPE."""
    model = getattr(tokenizer, "sentencepiece_model", None)
    if model is None:
        path = Path(str(getattr(tokenizer, "name_or_path", "") or "."), SENTENCEPIECE_FILE)
        sides = getattr(tokenizer, "spm_files", None) or [None]
        path = path if path.is_file() or sides[0] is None else Path(sides[0])
        model = path.read_bytes() if path.is_file() else None
    return model


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: str | Path) -> None:
    """`save_pretrained`, made for users of either transformers line and of plain `tokenizers`.

    transformers 5.x names the class `TokenizersBackend` in tokenizer_config.json, which 4.57 cannot load; both
    lines load `PreTrainedTokenizerFast` (5.x keeps it as an alias). So too the extra special tokens' list. The
    truncation that the last batched call set (training's max length) would be saved in tokenizer.json and cut
    every later `Tokenizer.from_file` user's text: it is not part of the tokenizer, so it is cleared (transformers
    sets it again per call).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)  # none: a Python tokenizer (an imported Moses + BPE)
    if backend is not None:
        backend.no_truncation()
        backend.no_padding()
    tokenizer.save_pretrained(folder)
    model = sentencepiece_model_of(tokenizer) if not getattr(tokenizer, "spm_files", None) else None  # saves its own
    if model is not None:
        Path(folder, SENTENCEPIECE_FILE).write_bytes(model)
    path = Path(folder) / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    changed = dict(config)
    if config.get("tokenizer_class") == "TokenizersBackend":
        changed["tokenizer_class"] = "PreTrainedTokenizerFast"
    if isinstance(config.get("extra_special_tokens"), list):  # 5.x's list (a multilingual model's >>xx<<): 4.57
        # reads a dict there and the list under its old name, which 5.x reads too
        changed["additional_special_tokens"], changed["extra_special_tokens"] = config["extra_special_tokens"], {}
    if changed != config:
        path.write_text(json.dumps(changed, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    """A tokenizer whose ids are `words`' positions (space-separated words, `</s>` appended), for models over a
    made-up vocabulary (the bench's, the tests'): `words` holds `<pad>`, `<s>`, `</s>` and `<unk>`."""
    backend = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", words.index("</s>"))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")  # fmt: skip
