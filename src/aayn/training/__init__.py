"""Training: recipe arguments, the Seq2SeqTrainer subclass, translation metrics, checkpoint averaging.

Names load on first use, so that parsing a recipe (`aayn train --help`, a mistyped key) needs none of datasets,
evaluate or the model.
"""

import importlib

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


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_NAMES)
