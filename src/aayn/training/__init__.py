"""Training: recipe arguments, the Seq2SeqTrainer subclass, translation metrics, checkpoint averaging."""

from .arguments import DataTrainingArguments, ModelArguments, parse_arguments
from .average import average_checkpoints, averaged_state_dict
from .run import run
from .trainer import AaynTrainer, TrainingDiverged, translation_metrics

__all__ = [
    "AaynTrainer",
    "DataTrainingArguments",
    "ModelArguments",
    "TrainingDiverged",
    "average_checkpoints",
    "averaged_state_dict",
    "parse_arguments",
    "run",
    "translation_metrics",
]
