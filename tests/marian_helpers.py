"""Tiny random `MarianMTModel` folders made offline, as transformers' Marian conversion lays them out: SentencePiece
models for each side (`source.spm`, `target.spm`), one `vocab.json` (or a `target_vocab.json` beside it for separate
vocabularies), `</s>` 0, `<unk>` 1, `<pad>` last, a non-zero output bias."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
from training_helpers import write_numbers_corpus


def sentencepiece_model(lines: list[str], size: int) -> bytes:
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=size, model_type="unigram",
        character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1, minloglevel=2,
    )  # fmt: skip
    return model.getvalue()


def pieces(model: bytes) -> list[str]:
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def vocabulary(*models: bytes) -> dict[str, int]:
    """`</s>` 0, `<unk>` 1, the models' pieces, `<pad>` last: transformers' conversion's order."""
    words = ["</s>", "<unk>"] + sorted({piece for model in models for piece in pieces(model)} - {"<unk>"}) + ["<pad>"]
    return {word: i for i, word in enumerate(words)}


def teach(model, tokenizer, english: list[str], french: list[str], steps: int) -> None:
    """A few Adam steps of transformers' own model on the corpus: outputs that end and vary, not a random model's
    one token repeated."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        rows = slice(step * 16 % len(english), step * 16 % len(english) + 16)
        batch = tokenizer(english[rows], text_target=french[rows], return_tensors="pt", padding=True)
        batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


SPANISH = ["cero", "uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve"]


def tiny_marian(
    folder: Path,
    *,
    activation: str = "swish",
    shared: bool = True,
    steps: int = 60,
    seed=0,
    multi: bool = False,
    d_model: int | None = None,
    scale_embedding: bool = True,
) -> Path:
    """A MarianMTModel (d_model 16, two layers a side, non-zero final_logits_bias) trained `steps` steps by
        transformers on the numbers corpus (en -> fr), and its MarianTokenizer, saved into `folder`. `multi`: a
        multi-target model as OPUS-MT's en-mul (d_model 32 unless given): `>>fr<<` or `>>es<<` before the English text
        asks French or Spanish (200 steps make its outputs differ by target). `scale_embedding`: OPUS-MT's configs set
    it (embeddings times sqrt(d_model)); MarianConfig's default does not."""
    from training_helpers import FR
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    corpus = write_numbers_corpus(folder.parent / f"{folder.name}-corpus")
    english = (corpus / "train.en").read_text(encoding="utf-8").splitlines()
    french = (corpus / "train.fr").read_text(encoding="utf-8").splitlines()
    source, target = sentencepiece_model(english, 40), sentencepiece_model(french, 40)
    if multi:  # the same numbers in Spanish, word for word
        spanish = [" ".join(SPANISH[FR.index(word)] for word in line.lower().rstrip(".").split()).capitalize() + "."
                   for line in french]  # fmt: skip
        target = sentencepiece_model(french + spanish, 60)
        rows = [(f">>{code}<< {e}", t) for e, f, s in zip(english, french, spanish)
                for code, t in (("fr", f), ("es", s))]  # fmt: skip
        english, french = [row[0] for row in rows], [row[1] for row in rows]
    folder.mkdir(parents=True)
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    if shared:
        vocab = target_vocab = vocabulary(source, target)
    else:
        vocab, target_vocab = vocabulary(source), vocabulary(target)
        (folder / "target_vocab.json").write_text(json.dumps(target_vocab), encoding="utf-8")
    if multi:  # the target tokens before `<pad>`, as in OPUS-MT's vocabularies
        vocab = target_vocab = {**{word: i for i, word in enumerate(list(vocab)[:-1])}, ">>es<<": len(vocab) - 1,
                                ">>fr<<": len(vocab), "<pad>": len(vocab) + 1}  # fmt: skip
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = MarianTokenizer(
        str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"),
        target_vocab_file=None if shared else str(folder / "target_vocab.json"), source_lang="en",
        target_lang="mul" if multi else "fr",
        separate_vocabs=not shared, model_max_length=64,
    )  # fmt: skip
    pad = len(target_vocab) - 1
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(target_vocab), d_model=d_model or (32 if multi else 16),
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32,
        activation_function=activation, max_position_embeddings=64, pad_token_id=pad, eos_token_id=0,
        decoder_start_token_id=pad, share_encoder_decoder_embeddings=shared, scale_embedding=scale_embedding,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    model.generation_config = GenerationConfig(
        num_beams=3, max_length=24, bad_words_ids=[[pad]], forced_eos_token_id=0, eos_token_id=0, pad_token_id=pad,
        decoder_start_token_id=pad,
    )  # fmt: skip
    teach(model, tokenizer, english, french, steps)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)  # a bias the import must carry
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
