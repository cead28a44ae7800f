"""How translations are scored, for training (the Trainer's validation and test metrics) and for `aayn evaluate`
alike: sacreBLEU's BLEU and chrF through `evaluate`, from a metric module shipped here and loaded by its path
(`evaluate.load("sacrebleu")` would fetch its script from the Hub), and the paper's tokenized BLEU for German
(`paper_bleu`). Nothing is imported here."""

from pathlib import Path

METRICS_MODULE = str(Path(__file__).parent / "translation_metrics")  # evaluate.load(METRICS_MODULE)
