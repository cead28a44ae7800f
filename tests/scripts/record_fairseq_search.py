"""Records fairseq's own default search (`fairseq-interactive` with no search options: beam 5, lenpen 1, at most 200
tokens before eos) on a few hundred Bible verses for four fairseq 0.12 models: the two committed fixtures (trained;
post-norm SentencePiece, pre-norm Moses + BPE) and each with its weights drawn anew (`with_random_weights`, seeded:
a model that learned nothing, whose outputs meet the length limit). Writes tests/data/fairseq/default_search.json,
which tests/test_fairseq_search.py compares with the imported folders' default search. Needs fairseq (the venv of
make_fairseq_fixtures.py):

    /tmp/fsq/bin/python tests/scripts/record_fairseq_search.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairseq_helpers import FIXTURES, with_random_weights
from make_fairseq_fixtures import bible, fairseq_tool

OUT = FIXTURES / "default_search.json"
FIRST_VERSE = 26024  # after the fixtures' own 24 test verses, in the New Testament, away from the training verses
MODELS = {  # name: (fixture, seed of the drawn weights or None, verses)
    "postnorm-spm": ("postnorm-spm", None, 300),
    "prenorm-moses-bpe": ("prenorm-moses-bpe", None, 300),
    "postnorm-spm-random": ("postnorm-spm", 1, 150),
    "prenorm-moses-bpe-random": ("prenorm-moses-bpe", 2, 150),
}


def interactive(folder: Path, checkpoint: Path, texts: list[str]) -> list[dict]:
    """fairseq-interactive's default search, one verse at a time in one process: per verse its H- (tokens),
    D- (detokenized) and score."""
    data = Path(tempfile.mkdtemp(prefix="dicts-"))
    for lang in ("en", "fr"):
        shutil.copy(folder / f"dict.{lang}.txt", data / f"dict.{lang}.txt")
    if (folder / "sentencepiece.bpe.model").is_file():
        subword = ["--bpe", "sentencepiece", "--sentencepiece-model", str(folder / "sentencepiece.bpe.model")]
    else:
        subword = ["--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", str(folder / "bpe.codes")]
    command = [fairseq_tool("fairseq-interactive"), str(data), "--path", str(checkpoint), "--source-lang", "en",
               "--target-lang", "fr", "--cpu", "--buffer-size", "1", "--batch-size", "1", *subword]  # fmt: skip
    done = subprocess.run(command, input="".join(f"{t}\n" for t in texts), capture_output=True, text=True, check=True)
    rows: dict[int, dict] = {}
    for printed in done.stdout.splitlines():
        tag, _, rest = printed.partition("-")
        if tag in ("H", "D") and rest[:1].isdigit():
            fields = rest.split("\t")
            row = rows.setdefault(int(fields[0]), {})
            row[tag] = fields[-1]
            row["score"] = float(fields[1])
    shutil.rmtree(data)
    return [rows[i] for i in range(len(texts))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    english = bible("4")
    recorded = json.loads(OUT.read_text(encoding="utf-8")) if OUT.is_file() else {}
    work = Path(tempfile.mkdtemp(prefix="fairseq-search-"))
    for name in args.models.split(","):
        fixture, seed, verses = MODELS[name]
        folder = FIXTURES / fixture
        checkpoint = folder / "checkpoint.pt"
        if seed is not None:
            checkpoint = with_random_weights(checkpoint, work / name / "checkpoint.pt", seed)
        texts = english[FIRST_VERSE : FIRST_VERSE + verses]
        started = time.perf_counter()
        rows = interactive(folder, checkpoint, texts)
        print(f"{name}: {len(rows)} verses in {time.perf_counter() - started:.0f} s", flush=True)
        recorded[name] = {"fixture": fixture, "seed": seed, "first_verse": FIRST_VERSE, "sources": texts,
                          "fairseq_interactive": rows}  # fmt: skip
        OUT.write_text(json.dumps(recorded, ensure_ascii=False) + "\n", encoding="utf-8")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
