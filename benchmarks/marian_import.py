"""`aayn import marian` on a folder no test made: a `MarianMTModel` of the demo's shape trained here by transformers
(its own `Seq2SeqTrainer`, `--steps` steps on the embedded Bible data, en -> fr, SentencePiece models for each side
as OPUS-MT has), then imported; both translate the `--verses` first test verses greedily and with transformers'
beam search (the folder's generation config: beam 4; aayn with `paper_decoding=False`), batches of 32: how many
outputs differ token for token, the first step's largest logit difference, the seconds each took and BLEU; then
aayn's default search (the paper's, by the folder's rules). Run alone on an idle machine.

    python benchmarks/marian_import.py --steps 300 --verses 1116 --work /tmp/marian-bench
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def marian_folder(work: Path, steps: int, bf16: bool) -> Path:
    """The MarianMTModel trained here (reused where `work` holds it already)."""
    from marian_helpers import sentencepiece_model, vocabulary
    from transformers import (
        DataCollatorForSeq2Seq,
        GenerationConfig,
        MarianConfig,
        MarianMTModel,
        MarianTokenizer,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
    )  # fmt: skip

    from aayn.data import load_translation_dataset

    folder = work / "marian"
    if (folder / "config.json").is_file():
        return folder
    data = load_translation_dataset("bible", source_lang="en", target_lang="fr")
    pairs = data["train"]["translation"]
    english, french = [row["en"] for row in pairs], [row["fr"] for row in pairs]
    source, target = sentencepiece_model(english, 4000), sentencepiece_model(french, 4000)
    folder.mkdir(parents=True)
    (folder / "source.spm").write_bytes(source)
    (folder / "target.spm").write_bytes(target)
    vocab = vocabulary(source, target)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"),
                                source_lang="en", target_lang="fr", model_max_length=128)  # fmt: skip
    pad = len(vocab) - 1
    # scaled embeddings, as OPUS-MT's (MarianConfig's default is unscaled: N(0, 0.02) embeddings under sinusoids of
    # size 1, and a model that learnt to ignore its source, docs/measurements.md)
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=128, encoder_layers=3, decoder_layers=3,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512,
        max_position_embeddings=256, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        scale_embedding=True,
    )  # fmt: skip
    model = MarianMTModel(config)
    model.config._attn_implementation = "eager"  # as the demo recipe: torch's SDPA backward is slow in bf16 on CPU
    model.generation_config = GenerationConfig(num_beams=4, max_length=256, bad_words_ids=[[pad]],
                                               forced_eos_token_id=0, eos_token_id=0, pad_token_id=pad,
                                               decoder_start_token_id=pad)  # fmt: skip

    def encoded(rows):
        sides = {side: [row[side] for row in rows["translation"]] for side in ("en", "fr")}
        return tokenizer(sides["en"], text_target=sides["fr"], max_length=128, truncation=True)

    train = data["train"].map(encoded, batched=True, remove_columns=data["train"].column_names)
    # The demo recipe's optimizer and schedule (recipes/demo.yaml), in transformers' own arguments: with its linear
    # schedule and 100 warmup steps this post-norm model learnt one sentence for every verse (docs/measurements.md).
    arguments = Seq2SeqTrainingArguments(
        str(work / "trainer"), max_steps=steps, per_device_train_batch_size=32, learning_rate=2e-3,
        lr_scheduler_type="inverse_sqrt", warmup_steps=min(1000, steps // 4), adam_beta2=0.98, adam_epsilon=1e-9,
        label_smoothing_factor=0.1, max_grad_norm=0.0, train_sampling_strategy="group_by_length", bf16=bf16,
        use_cpu=True, seed=1, report_to=[], save_strategy="no", logging_steps=150,
    )  # fmt: skip
    trainer = Seq2SeqTrainer(model=model, args=arguments, train_dataset=train, processing_class=tokenizer,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model))  # fmt: skip
    trainer.train()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def decoded(model, tokenizer, texts: list[str], **options) -> tuple[list[list[int]], float]:
    outputs, start = [], time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(texts), 32):
            batch = tokenizer(texts[i : i + 32], return_tensors="pt", padding=True)
            rows = model.generate(**batch, **options).tolist()
            outputs += [[t for t in row if t != model.config.pad_token_id] for row in rows]
    return outputs, time.perf_counter() - start


def bleu(tokenizer, outputs: list[list[int]], references: list[str]) -> float:
    """sacreBLEU (13a) of the decoded outputs against the references."""
    import sacrebleu

    texts = [text.strip() for text in tokenizer.batch_decode(outputs, skip_special_tokens=True)]
    return round(sacrebleu.corpus_bleu(texts, [references]).score, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--verses", type=int, default=1116)
    parser.add_argument("--work", type=Path, default=Path("/tmp/marian-bench"))
    parser.add_argument("--train_only", action="store_true", help="stop once the folder is trained and imported")
    parser.add_argument("--bf16", action="store_true", help="train with bf16 autocast (a CPU with bf16 matmuls)")
    args = parser.parse_args()
    torch.manual_seed(0)
    folder = marian_folder(args.work, args.steps, args.bf16)
    imported = args.work / "imported"
    if not imported.is_dir():
        from aayn.cli import main as aayn

        assert aayn(["import", "marian", str(folder), "--output_dir", str(imported)]) == 0
    if args.train_only:
        return
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianMTModel

    from aayn.data import load_translation_dataset

    test = load_translation_dataset("bible", source_lang="en", target_lang="fr")["test"]["translation"][: args.verses]
    texts, references = [row["en"] for row in test], [row["fr"] for row in test]
    marian = MarianMTModel.from_pretrained(folder).eval()
    ours = AutoModelForSeq2SeqLM.from_pretrained(imported).eval()
    tokenizer = AutoTokenizer.from_pretrained(imported)
    batch = tokenizer(texts[:32], return_tensors="pt", padding=True)
    start = torch.full((32, 1), marian.config.decoder_start_token_id)
    with torch.no_grad():
        gap = (ours(**batch, decoder_input_ids=start).logits - marian(**batch, decoder_input_ids=start).logits).abs()
    report = {"verses": len(texts), "steps": args.steps, "first_step_logits_max_abs_difference": float(gap.max())}
    for name, options in (("greedy", {"num_beams": 1}), ("beam4", {})):
        theirs, their_seconds = decoded(marian, tokenizer, texts, **options)
        mine, my_seconds = decoded(ours, tokenizer, texts, paper_decoding=False, **options)
        report[name] = {"differ": sum(a != b for a, b in zip(theirs, mine)), "marian_s": round(their_seconds, 1),
                        "aayn_s": round(my_seconds, 1), "bleu": bleu(tokenizer, theirs, references)}  # fmt: skip
        print(json.dumps({name: report[name]}), flush=True)
    paper, seconds = decoded(ours, tokenizer, texts)  # aayn's default: the paper's search by the folder's rules
    report["aayn_paper_search"] = {"bleu": bleu(tokenizer, paper, references), "aayn_s": round(seconds, 1)}
    print(json.dumps({"aayn_paper_search": report["aayn_paper_search"]}), flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
