"""Training: recipe arguments, the Seq2SeqTrainer subclass, translation metrics, checkpoint averaging.

Names load on first use, so that parsing a recipe (`aayn train --help`, a mistyped key) needs none of datasets,
evaluate or the model.
"""

from .. import lazy_attributes

_NAMES = {
    "AaynTrainer": "trainer",
    "DataTrainingArguments": "arguments",
    "ModelArguments": "arguments",
    "TrainingDiverged": "trainer",
    "average_checkpoints": "average",
    "averaged_state_dict": "average",
    "parse_arguments": "arguments",
    "run": "job",
    "translation_metrics": "trainer",
}


__getattr__ = lazy_attributes(__name__, _NAMES)


__all__ = list(_NAMES)
