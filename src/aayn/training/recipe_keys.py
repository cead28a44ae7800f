"""The recipe keys of transformers' `Seq2SeqTrainingArguments`, read from its installed source with `ast`.

`aayn train --help` answers before `Seq2SeqTrainingArguments` is imported (its module imports torch, which takes
seconds): it reads the class's fields from transformers' source (`trainer_fields`), and imports the class only where
that source cannot be read. Parsing is transformers' `HfArgumentParser`'s. tests/test_recipe_keys.py checks, on each
transformers line, that what is read equals the class.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

TRAINER_ARGUMENT_SOURCES = (
    ("training_args.py", "TrainingArguments"),
    ("training_args_seq2seq.py", "Seq2SeqTrainingArguments"),
)


@dataclass(frozen=True)
class SourceField:
    """A dataclass field as its source writes it: what `--help` shows."""

    name: str
    annotation: str
    default: str | None  # source text of the default; None: required
    help: str


def _source_field(statement: ast.AnnAssign) -> SourceField | None:
    name = statement.target.id
    annotation = ast.unparse(statement.annotation)
    if name.startswith("_") or annotation.startswith(("ClassVar", "typing.ClassVar")):
        return None
    value = statement.value
    default, help_text = (None if value is None else ast.unparse(value)), ""
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
        keywords = {keyword.arg: keyword.value for keyword in value.keywords}
        if isinstance(keywords.get("init"), ast.Constant) and keywords["init"].value is False:
            return None
        default = (
            ast.unparse(keywords["default"])
            if "default" in keywords
            else f"{ast.unparse(keywords['default_factory'])}()"
            if "default_factory" in keywords
            else None
        )
        metadata = keywords.get("metadata")
        if isinstance(metadata, ast.Dict):
            for key, item in zip(metadata.keys, metadata.values):
                if isinstance(key, ast.Constant) and key.value == "help":
                    try:
                        help_text = ast.literal_eval(item)
                    except ValueError:  # an expression, not a literal: show its source
                        help_text = ast.unparse(item)
    return SourceField(name, annotation, default, str(help_text))


@functools.cache
def trainer_fields() -> tuple[SourceField, ...] | None:
    """`Seq2SeqTrainingArguments`' init fields read from transformers' installed source, without importing it;
    None where the source is not there or not laid out as expected (then callers import the class)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    fields: dict[str, SourceField] = {}
    for file_name, class_name in TRAINER_ARGUMENT_SOURCES:
        try:
            tree = ast.parse((root / file_name).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            return None
        classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
        if len(classes) != 1:
            return None
        for statement in classes[0].body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                source_field = _source_field(statement)
                if source_field is not None:
                    fields[source_field.name] = source_field  # a subclass's field replaces its base's
    return tuple(fields.values()) if "output_dir" in fields and "predict_with_generate" in fields else None


def _imported_field(f: dataclasses.Field, annotation: str) -> SourceField:
    required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    return SourceField(f.name, annotation, None if required else repr(f.default), f.metadata.get("help", ""))


def aayn_fields(cls: type) -> list[SourceField]:
    """The fields of one of aayn's dataclasses, annotations as written (HfArgumentParser replaces `field.type`
    with the resolved type once it has parsed)."""
    return [_imported_field(f, str(cls.__annotations__[f.name])) for f in dataclasses.fields(cls) if f.init]


def imported_trainer_fields() -> list[SourceField]:
    from transformers import Seq2SeqTrainingArguments

    return [_imported_field(f, str(f.type)) for f in dataclasses.fields(Seq2SeqTrainingArguments) if f.init]
