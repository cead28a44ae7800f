"""BLEU and chrF with sacreBLEU on detokenized text, as an `evaluate` module loaded from this file's folder.

`evaluate.load("sacrebleu")` fetches its script from the Hub; this module ships inside aayn and is loaded by path,
so evaluation works offline. One reference per sentence (WMT test sets).
"""

import datasets
import evaluate
import sacrebleu

_CITATION = """\
@inproceedings{post-2018-call,
  title = "A Call for Clarity in Reporting {BLEU} Scores",
  author = "Post, Matt",
  booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
  year = "2018",
  pages = "186--191",
}
"""

_DESCRIPTION = "Corpus BLEU (13a tokenization) and chrF (character 6-grams, beta 2) from sacreBLEU, with signatures."

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of detokenized hypotheses.
    references: list of detokenized references, one per hypothesis (a string, or a one-element list).
Returns:
    bleu, chrf: corpus scores in [0, 100]; bleu_signature, chrf_signature: sacreBLEU signatures;
    sentences: the number of hypotheses scored.
"""


class TranslationMetrics(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
            reference_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(self, predictions, references):
        bleu = sacrebleu.BLEU()
        chrf = sacrebleu.CHRF()
        return {
            "bleu": bleu.corpus_score(predictions, [references]).score,
            "chrf": chrf.corpus_score(predictions, [references]).score,
            "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()),
            "sentences": len(predictions),
        }
