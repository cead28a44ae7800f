"""aayn beside fairseq 0.12 on the same tokens: a training step and a beam search of each, in one
process, alternating, on the same device.

    python benchmarks/fairseq_side.py [--device cuda] [--shape base|big|demo] [--dtype bf16|float32]
                                      [--tokens 4096 25000] [--steps 20] [--batch 32] [--new_tokens 40]

Both models have the shape's dimensions, one embedding matrix shared by source, target and output (§3.4), their
own initial weights. Training, per token budget: the batch `profile_step.py` takes (the max-tokens sampler's
batch of newstest2014-like lengths), fairseq's `TransformerModel` (its `transformer` architecture, the paper's
post-norm) with its own `label_smoothed_nll_loss` (0.1, summed over target tokens and divided by their number, as
fairseq's criterion and trainer do) and aayn with §5.4's fused loss, each under bf16 autocast (or float32 with
TF32), fused Adam (fairseq's `--fp16`/`--bf16` keep half weights with float32 master weights instead; here both
arms run the same mixed precision); median step and target tokens/s. Decoding: `--batch` sentences of those
lengths, beam 4, every output forced to `--new_tokens` tokens (fairseq's `SequenceGenerator` with min_len = max_len;
aayn's `generate` with min_new_tokens = max_new_tokens), generated tokens/s. Prints one JSON line per row.

fairseq 0.12 imports every task at import, some of which import scikit-learn and SciPy; neither is used by a
translation model, so where they are missing (a GPU machine they are not carried to) they are stood in for by
modules that fail if called.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from profile_step import SHAPES


@functools.cache
def import_fairseq():
    """fairseq's modules; scikit-learn and SciPy stood in for where missing (see the module's text)."""
    import importlib.util

    def unneeded(name):
        if name.startswith("__"):
            raise AttributeError(name)

        def missing(*args, **kwargs):
            raise RuntimeError(f"{name}: not installed (fairseq's classification and audio tasks use it)")

        return missing

    for package, module in (("sklearn", "metrics"), ("scipy", "stats")):
        if package not in sys.modules and importlib.util.find_spec(package) is None:
            for name in (package, f"{package}.{module}"):
                sys.modules[name] = types.ModuleType(name)
                sys.modules[name].__getattr__ = unneeded
            setattr(sys.modules[package], module, sys.modules[f"{package}.{module}"])
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
    from fairseq.data import Dictionary
    from fairseq.models.transformer import TransformerModel, base_architecture
    from fairseq.sequence_generator import SequenceGenerator

    return types.SimpleNamespace(Dictionary=Dictionary, TransformerModel=TransformerModel,
                                 base_architecture=base_architecture, SequenceGenerator=SequenceGenerator,
                                 label_smoothed_nll_loss=label_smoothed_nll_loss)  # fmt: skip


def fairseq_model(config, device: str):
    """fairseq's transformer with `config`'s dimensions and one shared embedding matrix; and its dictionary."""
    fs = import_fairseq()
    dictionary = fs.Dictionary()  # <s> 0, <pad> 1, </s> 2, <unk> 3
    for i in range(config.vocab_size - len(dictionary)):
        dictionary.add_symbol(f"w{i}")
    args = argparse.Namespace(
        arch="transformer", share_all_embeddings=True, encoder_embed_dim=config.d_model,
        decoder_embed_dim=config.d_model, encoder_ffn_embed_dim=config.encoder_ffn_dim,
        decoder_ffn_embed_dim=config.decoder_ffn_dim, encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers, encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads, dropout=config.dropout,
        max_source_positions=1024, max_target_positions=1024,
    )  # fmt: skip
    fs.base_architecture(args)
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return fs.TransformerModel.build_model(args, task).to(device), dictionary


def as_fairseq(ids: torch.Tensor, mask: torch.Tensor, dictionary) -> torch.Tensor:
    """The bench's ids (clear of the special ones, eos 2 as in fairseq) with fairseq's pad (1) where `mask` is 0."""
    return ids.masked_fill(mask == 0, dictionary.pad())


def training_arms(config, fairseq, dictionary, model, batch, device, bf16: bool) -> dict:
    """{arm: one training step} of aayn and fairseq on the same batch."""
    label_smoothed_nll_loss = import_fairseq().label_smoothed_nll_loss
    source, mask, labels = batch
    target_mask = (labels != -100).long()
    fs_source = as_fairseq(source, mask, dictionary)
    fs_target = as_fairseq(labels.clamp(min=0), target_mask, dictionary)
    previous = torch.cat([torch.full_like(fs_target[:, :1], dictionary.eos()), fs_target[:, :-1]], dim=1)
    previous = previous.masked_fill(target_mask == 0, dictionary.pad())  # eos, then the target shifted right
    lengths = mask.sum(1)
    optimizers = {arm: torch.optim.Adam(m.parameters(), lr=1e-7, betas=(0.9, 0.98), eps=1e-9,
                                        fused=device.startswith("cuda") or None)
                  for arm, m in (("aayn", model), ("fairseq", fairseq))}  # fmt: skip

    def step(arm):
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
            if arm == "aayn":
                loss = model(input_ids=source, attention_mask=mask, labels=labels).loss
            else:
                logits = fairseq(fs_source, lengths, previous)[0]
                lprobs = torch.log_softmax(logits.float(), dim=-1).view(-1, logits.shape[-1])
                loss, _ = label_smoothed_nll_loss(lprobs, fs_target.view(-1), 0.1, ignore_index=dictionary.pad())
                loss = loss / target_mask.sum()
        loss.backward()
        optimizers[arm].step()
        optimizers[arm].zero_grad(set_to_none=True)

    return {arm: (lambda arm=arm: step(arm)) for arm in optimizers}


def decoding_arms(model, fairseq, dictionary, batch, new_tokens: int, beams: int) -> dict:
    """{arm: one forced-length beam search of the batch} of aayn and fairseq."""
    source, mask = batch
    generator = import_fairseq().SequenceGenerator([fairseq], dictionary, beam_size=beams, max_len_a=0,
                                                   max_len_b=new_tokens, min_len=new_tokens)  # fmt: skip
    sample = {"net_input": {"src_tokens": as_fairseq(source, mask, dictionary), "src_lengths": mask.sum(1)}}
    return {
        "aayn": lambda: model.generate(input_ids=source, attention_mask=mask, num_beams=beams,
                                       min_new_tokens=new_tokens, max_new_tokens=new_tokens),
        "fairseq": lambda: generator.generate([fairseq], sample),
    }  # fmt: skip


def timed(arms: dict, repeats: int, device: str) -> dict:
    """Median seconds of each arm, alternating, after one warm-up call each."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    times = {arm: [] for arm in arms}
    for repeat in range(repeats + 1):
        for arm, call in arms.items():
            sync()
            start = time.perf_counter()
            call()
            sync()
            if repeat:
                times[arm].append(time.perf_counter() - start)
    return {arm: statistics.median(values) for arm, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default="base", choices=sorted(SHAPES))
    parser.add_argument("--dtype", default="bf16", choices=["float32", "bf16"])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 25000])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=40)
    parser.add_argument("--beams", type=int, default=4)
    args = parser.parse_args()
    from aayn import AaynConfig, AaynForConditionalGeneration
    from aayn.bench.base_shape import padded_batch, sentence_lengths, token_batch

    device, bf16 = args.device, args.dtype == "bf16"
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    config = AaynConfig(**SHAPES[args.shape], label_smoothing=0.1)
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(config).to(device).train()
    fairseq, dictionary = fairseq_model(config, device)
    fairseq.train()
    name = torch.cuda.get_device_name() if device.startswith("cuda") else device
    lengths = sentence_lengths(None) * 40
    for tokens in args.tokens:
        batch = token_batch(lengths, tokens, config, torch.Generator().manual_seed(0), device)
        target_tokens = int((batch[2] != -100).sum())
        seconds = timed(training_arms(config, fairseq, dictionary, model, batch, device, bf16), args.steps, device)
        print(json.dumps({"device": name, "row": "train", "shape": args.shape, "dtype": args.dtype,
                          "token_budget": tokens, "target_tokens": target_tokens,
                          **{f"{arm}_tokens_per_s": round(target_tokens / s) for arm, s in seconds.items()},
                          "aayn_over_fairseq": round(seconds["fairseq"] / seconds["aayn"], 2)}),
              flush=True)  # fmt: skip
    model.eval()
    fairseq.eval()
    ids, mask = padded_batch(
        sorted(lengths)[len(lengths) // 2 :][: args.batch], config, torch.Generator().manual_seed(1)
    )
    batch = (ids.to(device), mask.to(device))
    with torch.no_grad(), torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
        seconds = timed(decoding_arms(model, fairseq, dictionary, batch, args.new_tokens, args.beams), 2, device)
    generated = args.batch * args.new_tokens
    print(json.dumps({"device": name, "row": f"beam{args.beams}_b{args.batch}", "shape": args.shape,
                      "dtype": args.dtype, "new_tokens": args.new_tokens,
                      **{f"{arm}_tokens_per_s": round(generated / s) for arm, s in seconds.items()},
                      "aayn_over_fairseq": round(seconds["fairseq"] / seconds["aayn"], 2)}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
