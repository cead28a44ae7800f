"""`aayn evaluate`: BLEU and chrF of a saved model on a split of a parallel corpus."""

from __future__ import annotations

from pathlib import Path

import evaluate
from transformers.utils import logging

from ..data import load_translation_dataset
from ..folders import write_text_atomically
from ..formats.translator import AS_SAVED, DECODING_BATCH_TOKENS, EngineOptions
from ..metrics import METRICS_MODULE
from ..metrics.paper_bleu import paper_bleu_scores
from .opening import ModelFolder, open_translator

logger = logging.get_logger(__name__)


def evaluate_model(
    model_path: str | ModelFolder,
    dataset_name: str,
    *,
    source_lang: str,
    target_lang: str,
    dataset_config_name: str | None = None,
    split: str = "test",
    max_samples: int | None = None,
    batch_tokens: int = DECODING_BATCH_TOKENS,
    device: str = "cpu",
    options: EngineOptions = AS_SAVED,
    output: str | None = None,
    pivot: str | None = None,
    **generate,
) -> dict:
    """`{"bleu", "chrf", "bleu_signature", "chrf_signature", "sentences"}` of the model's translations of `split`
    (and `paper_bleu` into German); `output`: a file to write the translations to, one line per sentence.
    `model_path` may be a CTranslate2 folder that `aayn export` wrote (e.g. to see what int8 weights cost), or the
    `ModelFolder` the caller located already. `options`: how the engine computes (`translator.EngineOptions`);
    `pivot`: a multilingual folder's language to translate through (`aayn translate --pivot`)."""
    from ..languages import folder_lang_pairs, folder_language_tokens
    from .targets import aimed, off_target_rate

    translator = open_translator([model_path], device, options=options)
    location = model_path.location if isinstance(model_path, ModelFolder) else str(model_path)
    targets = folder_language_tokens(location) if Path(location).is_dir() else {}
    if targets or pivot:  # a multi-target folder: the target's token before each source, a zero-shot direction said
        translator = aimed(translator, [location], source_lang, target_lang, pivot)
    data = load_translation_dataset(
        dataset_name, dataset_config_name, source_lang=source_lang, target_lang=target_lang, splits={"test": split}
    )["test"]
    if max_samples is not None:
        data = data.select(range(min(max_samples, len(data))))
    sources = [row["translation"][source_lang] for row in data]
    references = [row["translation"][target_lang] for row in data]
    hypotheses = translator.translate(sources, batch_tokens=batch_tokens, progress=f"translating {split}", **generate)
    if output is not None:  # the hypotheses, one per line in the split's order, written whole or not at all
        lines = "".join(" ".join(hypothesis.splitlines()) + "\n" for hypothesis in hypotheses)
        write_text_atomically(Path(output), lines)
    scores = evaluate.load(METRICS_MODULE).compute(predictions=hypotheses, references=references)
    if targets:  # the outputs not in the asked language, among the folder's languages
        languages = [lang for pair in folder_lang_pairs(location) for lang in pair] or [source_lang, *targets]
        rate = off_target_rate(hypotheses, target_lang, languages)
        if rate is not None:
            scores["off_target"] = rate
    return scores | paper_bleu_scores(hypotheses, references, target_lang, signature=True)
