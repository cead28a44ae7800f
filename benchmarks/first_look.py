"""A first side-by-side timing of AAYN and MarianMTModel at the paper's base shapes, on the same weights.

Not yet `aayn bench` (issue "Performance"): no JSON, no MFU, no beam rows. Alternates A/B, median of repeats
after a warm-up. Usage: python benchmarks/first_look.py [--repeats 5]
"""

import argparse
import platform
import statistics
import time

import torch
from transformers import MarianMTModel

from aayn import AaynConfig, AaynForConditionalGeneration
from aayn.marian import aayn_state_dict_from_marian, marian_config_for


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = AaynConfig(dropout=0.0)
    marian = MarianMTModel(marian_config_for(config))
    ours = AaynForConditionalGeneration(config)
    ours.load_state_dict(aayn_state_dict_from_marian(marian), strict=False)
    models = {"aayn": ours, "marian": marian}

    # train: 16 sentence pairs of 30 tokens (480 target tokens), forward + backward + Adam step
    source = torch.randint(4, config.vocab_size, (16, 30))
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=1e-6) for name, m in models.items()}

    def train_step(name):
        model = models[name].train()
        model(input_ids=source, labels=source).loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)

    def greedy(name, batch, new_tokens=20):
        model = models[name].eval()
        with torch.no_grad():
            model.generate(source[:batch], max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)

    rows = {
        "train (target tokens/s)": (train_step, source.numel()),
        "greedy_b1 (tokens/s)": (lambda n: greedy(n, 1), 20),
        "greedy_b16 (tokens/s)": (lambda n: greedy(n, 16), 16 * 20),
    }
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")  # fmt: skip
    for row, (fn, tokens) in rows.items():
        times = {name: [] for name in models}
        for name in models:  # warm-up
            fn(name)
        for _ in range(args.repeats):
            for name in models:  # alternate A/B
                times[name].append(timed(lambda: fn(name)))
        rate = {name: tokens / statistics.median(t) for name, t in times.items()}
        print(f"{row:26s} aayn {rate['aayn']:9.1f}  marian {rate['marian']:9.1f}  ratio {rate['aayn'] / rate['marian']:.2f}")


if __name__ == "__main__":
    main()
