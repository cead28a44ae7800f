"""The recipe keys read from transformers' source (no torch for `--help`) against the imported
`Seq2SeqTrainingArguments` and its parser; .ci/run runs this on each transformers line."""

import ast
import dataclasses

import pytest

from aayn.training.recipe_keys import trainer_fields

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def test_trainer_keys_read_from_transformers_source_are_the_dataclass_fields():
    """--help reads Seq2SeqTrainingArguments from source (no torch); the imported class is the
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
