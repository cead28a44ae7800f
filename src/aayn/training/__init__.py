"""Training, a module each: the recipe's arguments (`arguments`, `recipe_keys`), the run's plan made before any work
(`plan`), the run itself (`job`: data, model, trainer, test, final folder) and its model (`model`), the
Seq2SeqTrainer subclass with its metrics (`trainer`), bf16 weights with float32 masters (`master_weights`), FSDP2
(`fsdp`), the output folder's rules (`output`: locks, atomic moves, resumable checkpoints), checkpoint averaging
(`average`) and the copy task (`copy_task`).

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
