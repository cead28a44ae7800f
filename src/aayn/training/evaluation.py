"""`aayn evaluate`: BLEU and chrF of a saved model on a split of a parallel corpus."""

from __future__ import annotations

import evaluate
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.utils import logging

from ..data import load_translation_dataset
from .trainer import METRICS_MODULE

logger = logging.get_logger(__name__)


@torch.inference_mode()
def translate_texts(model, tokenizer, texts: list[str], *, batch_size: int = 32, max_source_length: int = 256, **generate) -> list[str]:
    """Translations in input order, decoded in batches of similar length (less padding, faster)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    outputs: list[str] = [""] * len(texts)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = tokenizer([texts[i] for i in chunk], return_tensors="pt", padding=True, truncation=True, max_length=max_source_length)
        tokens = model.generate(**batch.to(model.device), **generate)
        for i, text in zip(chunk, tokenizer.batch_decode(tokens, skip_special_tokens=True)):
            outputs[i] = text.strip()
    return outputs


def evaluate_model(
    model_path: str,
    dataset_name: str,
    *,
    source_lang: str,
    target_lang: str,
    dataset_config_name: str | None = None,
    split: str = "test",
    max_samples: int | None = None,
    batch_size: int = 32,
    device: str = "cpu",
    **generate,
) -> dict:
    """`{"bleu", "chrf", "bleu_signature", "chrf_signature", "sentences"}` of the model's translations of `split`."""
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_path).to(device).eval()
    data = load_translation_dataset(
        dataset_name, dataset_config_name, source_lang=source_lang, target_lang=target_lang, splits={"test": split}
    )["test"]
    if max_samples is not None:
        data = data.select(range(min(max_samples, len(data))))
    sources = [row["translation"][source_lang] for row in data]
    references = [row["translation"][target_lang] for row in data]
    hypotheses = translate_texts(model, tokenizer, sources, batch_size=batch_size, **generate)
    return evaluate.load(METRICS_MODULE).compute(predictions=hypotheses, references=references)
