"""CTranslate2 float32 and int8 against MarianMTModel on `aayn bench`'s beam4_b32 row (same weights, same 32
newstest2014-length sentences, 32 forced new tokens, 4 beams, median of 3 after a warm-up).

    python benchmarks/ct2_int8.py

int8 (`aayn export --quantization int8`) changes the numbers, so its outputs are not those of the PyTorch model.
"""

import statistics
import tempfile
import time
from pathlib import Path

import ctranslate2
import torch

from aayn import AaynConfig
from aayn.bench import equal_models, padded_batch, sentence_lengths
from aayn.export import save_ctranslate2

config = AaynConfig()
models = equal_models(config, "cpu", torch.float32)
tokens = ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(4, config.vocab_size)]
folder = tempfile.mkdtemp()
for name, quantization in (("float32", None), ("int8", "int8")):
    save_ctranslate2(models["aayn"], tokens, f"{folder}/{name}", quantization=quantization)
translators = {
    name: ctranslate2.Translator(f"{folder}/{name}", device="cpu", compute_type=name, intra_threads=torch.get_num_threads())
    for name in ("float32", "int8")
}
generator = torch.Generator().manual_seed(0)  # the batch aayn bench draws
lengths = sentence_lengths(Path(__file__).resolve().parents[2] / "shared" / "data" / "wmt14-mini")
picks = torch.randperm(len(lengths), generator=generator).tolist()
ids, mask = padded_batch([lengths[i] for i in picks[:32]], config.vocab_size, generator)
sources = [[tokens[i] for i in row[: int(n)]] for row, n in zip(ids.tolist(), mask.sum(1))]


def run(name: str) -> None:
    if name == "marian":
        with torch.no_grad():
            models["marian"].eval().generate(ids, attention_mask=mask, num_beams=4, do_sample=False,
                                             max_new_tokens=32, min_new_tokens=32)  # fmt: skip
    else:
        translators[name].translate_batch(sources, beam_size=4, min_decoding_length=32, max_decoding_length=32)


times = {name: [] for name in ("marian", "float32", "int8")}
for name in times:  # warm-up
    run(name)
for _ in range(3):
    for name in times:  # alternate
        start = time.perf_counter()
        run(name)
        times[name].append(time.perf_counter() - start)
rate = {name: 32 * 32 / statistics.median(t) for name, t in times.items()}
print({name: round(r, 1) for name, r in rate.items()}, "tokens/s;",
      f"ct2 float32 / marian {rate['float32'] / rate['marian']:.2f}, ct2 int8 / marian {rate['int8'] / rate['marian']:.2f}")
