"""Bulk translation of a corpus in shards (`aayn translate --input GLOB_OR_FOLDER --output_dir OUT`): each input shard
gives one output shard of the same name and format, line for line and in order, written whole or not at all (beside
its final name, then renamed), so that a rerun after a kill translates only the shards that are missing. Text
shards give their translations a line each; `.jsonl` and `.parquet` shards give the same rows with a `translation`
field beside the text field (`--text_field`, default `text`; `alignment` too with `--print_alignment`).

This process translates the shards one after another with the translator it opened; `--ray` hands them to the
actors of a Ray cluster (`aayn.translation.bulk_ray`)."""

from __future__ import annotations

import glob
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..folders import process_alive, staged_file
from ..formats.translator import TextError

TABLES = (".jsonl", ".parquet")  # row formats; any other shard is text lines


@dataclass
class BulkSettings:
    """What every shard is translated with: the output folder, the text field of row shards, and the translator's
    options (`nbest`'s keywords: generation settings, a glossary, alignments)."""

    output_dir: Path
    text_field: str = "text"
    batch_tokens: int | None = None
    generate: dict = field(default_factory=dict)
    target_token: str = ""  # a multi-target model's (`--target_lang`): every actor's translator puts it first


def shards_of(pattern: str) -> list[Path]:
    """The shards a folder holds (its files, sorted; hidden ones left out) or a glob matches, or a one-line error."""
    path = Path(pattern)
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    else:
        found = sorted(Path(p) for p in glob.glob(pattern) if Path(p).is_file())
    if not found:
        raise FileNotFoundError(f"--input {pattern}: no shard there (a folder of files, or a glob that matches files)")
    names = [p.name for p in found]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"--input {pattern}: shards from several folders share a name ({twice[0]}); each output "
                         "shard takes its input's name")  # fmt: skip
    return found


def missing(shards: list[Path], output_dir: Path) -> list[Path]:
    """The shards without a finished output, after removing what killed runs left half-written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    for partial in output_dir.glob(".*.partial-*"):
        pid = re.search(r"\.partial-(\d+)$", partial.name)
        if pid and not process_alive(int(pid.group(1))):
            partial.unlink(missing_ok=True)
    return [shard for shard in shards if not (output_dir / shard.name).exists()]


def read_shard(path: Path, text_field: str) -> tuple[list[str], object]:
    """(the texts, the rows or table they came from) of a shard, or ValueError naming the shard and the line."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as error:  # noqa: BLE001  pyarrow's errors have no common base worth naming
            raise ValueError(f"{path}: not a parquet file ({str(error).splitlines()[0]})") from None
        if text_field not in table.column_names:
            raise ValueError(f"{path}: no column {text_field!r} (--text_field; it has {table.column_names})")
        return [str(text) for text in table.column(text_field).to_pylist()], table
    try:
        lines = lines_of(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start})") from None
    if path.suffix != ".jsonl":
        return lines, None
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except ValueError as error:
            raise ValueError(f"{path}:{number}: not a JSON object ({error})") from None
        if not isinstance(row, dict) or not isinstance(row.get(text_field), str):
            raise ValueError(f"{path}:{number}: no text field {text_field!r} (--text_field)")  # noqa: TRY004  (a user error: exit 2)
        rows.append(row)
    return [row[text_field] for row in rows], rows


def lines_of(text: str) -> list[str]:
    """A file's lines as `wc -l` counts them: split at \n only (a \r before it dropped), not at the other line
    boundaries Python's `splitlines` knows (U+2028, \x1c, ...), which a corpus line may hold."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def written(kind: str, path: Path, source, translations: list[str], alignments: list | None) -> bytes | None:
    """The output shard's bytes in the format of `kind` (its input's suffix; None for parquet, written by pyarrow
    into `path` itself)."""
    if kind == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = source.append_column("translation", pa.array(translations, pa.string()))
        if alignments is not None:
            table = table.append_column("alignment", pa.array(alignments, pa.string()))
        pq.write_table(table, path)
        return None
    if kind == ".jsonl":
        rows = [{**row, "translation": text} for row, text in zip(source, translations)]
        if alignments is not None:
            rows = [{**row, "alignment": links} for row, links in zip(rows, alignments)]
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")
    if alignments is not None:
        translations = [f"{one_line(text)}\t{links}" for text, links in zip(translations, alignments)]
    return "".join(one_line(text) + "\n" for text in translations).encode("utf-8")


def translate_shard(translator, shard: Path, settings: BulkSettings) -> int:
    """One shard translated into the output folder, whole or not at all: the number of lines. Its partial file
    (`.NAME.partial-PID`) is there from the start, the claim of the process at work on it: what a kill leaves is the
    shard that process held, removed by the next run once that process is gone."""
    with staged_file(settings.output_dir / shard.name) as partial:
        partial.touch()
        texts, source = read_shard(shard, settings.text_field)
        options = dict(settings.generate)
        if options.get("sampling") is not None:  # the shard's own draws, whoever translates it and whenever
            options["sampling"] = options["sampling"].for_shard(shard.name)
        if settings.batch_tokens:
            options["batch_tokens"] = settings.batch_tokens
        try:
            best = translator.nbest(texts, 1, **options) if texts else []
        except TextError as error:  # the shard and its line (a parquet shard's row); the shards done are kept
            where = f"row {error.index + 1}" if shard.suffix == ".parquet" else f"line {error.index + 1}"
            raise ValueError(f"{shard}: {where} {error.reason}") from None
        translations = [hypotheses[0][1] for hypotheses in best]
        alignments = None
        if "alignment" in settings.generate:
            alignments = [hypotheses[0][2].pairs() for hypotheses in best]
        data = written(shard.suffix, partial, source, translations, alignments)
        if data is not None:
            partial.write_bytes(data)
    return len(texts)


def translate_shards(translator, shards: list[Path], settings: BulkSettings, log=print) -> dict:
    """Every shard without an output, one after another in this process; a summary."""
    started, todo = time.perf_counter(), missing(shards, settings.output_dir)
    lines = 0
    for number, shard in enumerate(todo, start=1):
        lines += translate_shard(translator, shard, settings)
        log(f"[{number}/{len(todo)}] {shard.name}")
    return summary(len(shards), len(todo), lines, time.perf_counter() - started, settings.output_dir)


def summary(shards: int, translated: int, lines: int, seconds: float, output_dir: Path) -> dict:
    return {"shards": shards, "translated": translated, "already_done": shards - translated, "lines": lines,
            "seconds": round(seconds, 1), "output_dir": str(output_dir)}  # fmt: skip
