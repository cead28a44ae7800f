"""The recipe keys read from transformers' source (no torch for `--help` and the key checks) against the imported
`Seq2SeqTrainingArguments` and its parser; .ci/run runs this on each transformers line."""

import ast
import dataclasses

import pytest

from aayn.training.arguments import argument_parser
from aayn.training.recipe_keys import enum_choices, trainer_fields

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def test_trainer_keys_read_from_transformers_source_are_the_dataclass_fields():
    """--help and the key check read Seq2SeqTrainingArguments from source (no torch); the imported class is the
    reference: the same init fields in the same order, the same help, the same literal defaults."""
    from transformers import Seq2SeqTrainingArguments

    source = {f.name: f for f in trainer_fields()}
    imported = {f.name: f for f in dataclasses.fields(Seq2SeqTrainingArguments) if f.init}
    assert list(source) == list(imported)
    literal_defaults = 0
    for name, reference in imported.items():
        assert source[name].help == reference.metadata.get("help", ""), name
        try:
            default = ast.literal_eval(source[name].default)
        except (ValueError, SyntaxError):
            continue
        literal_defaults += 1
        assert default == reference.default, name
    assert literal_defaults > len(imported) // 2


def test_the_enum_values_read_from_source_are_the_parsers_choices():
    """The choices checked before transformers is imported equal those its parser gives each `Enum | str` key."""
    fields = {f.name: f for f in trainer_fields()}
    actions = {action.dest: action for action in argument_parser()._actions}
    checked = {name: enum_choices(f.annotation) for name, f in fields.items() if enum_choices(f.annotation)}
    assert {"lr_scheduler_type", "optim", "eval_strategy", "save_strategy"} <= set(checked)
    for name, choices in checked.items():
        assert sorted(choices) == sorted(str(getattr(c, "value", c)) for c in actions[name].choices), name
