"""The search's CUDA graphs against its plain steps on a GPU, before they are timed:
every recorded search case (tests/scripts/record_search.py: float64 models, every option the search serves)
decoded on `--device` with `cuda_graphs=True` and without, the done check every 4 steps as on an accelerator.

    python benchmarks/graphs_check.py [--device cuda]

Prints one JSON line: the cases compared, those whose tokens differ, and the largest score difference (float64:
both should be 0 up to rounding). On a CPU the static steps run eagerly (what tests/test_search_recorded.py checks).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scripts"))
try:
    import pytest  # noqa: F401  (tests/tiny_models.py, which the record imports, marks a test with it)
except ImportError:  # a GPU machine without pytest: the mark alone
    import types

    sys.modules["pytest"] = types.SimpleNamespace(mark=types.SimpleNamespace(skipif=lambda *args, **kwargs: None))
from record_search import CASES, inputs, model

from aayn import generate_ensemble
from aayn.model import search_aayn


def decode(options: dict, device: str, graphs: bool) -> tuple[list, torch.Tensor]:
    options = dict(options)
    attn, prefix, ensemble, _ = (options.pop(key, None) for key in ("_attn", "_prefix", "_ensemble", "_outputs"))
    ids, mask, prefix_ids = (tensor.to(device) for tensor in inputs())
    kwargs = dict(attention_mask=mask, return_dict_in_generate=True, cuda_graphs=graphs, **options)
    if prefix:
        kwargs.update(decoder_input_ids=prefix_ids, decoder_attention_mask=(prefix_ids != 0).long())
    if ensemble:
        out = generate_ensemble([model(0).to(device), model(1).to(device)], ids, average=ensemble, **kwargs)
    else:
        out = model(0, attn or "sdpa").to(device).generate(ids, **kwargs)
    return out.sequences.tolist(), out.sequences_scores.double().cpu()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    search_aayn.done_check_interval = lambda device: search_aayn.ACCELERATOR_CHECK_EVERY
    cases = [(name, options) for name, options in CASES if options.get("_attn") != "flex_attention"]
    differ, largest = [], 0.0
    with torch.no_grad():
        for name, options in cases:
            (plain, plain_scores), (graphed, graphed_scores) = (decode(options, args.device, g) for g in (False, True))
            if plain != graphed:
                differ.append(name)
            else:
                largest = max(largest, float((plain_scores - graphed_scores).abs().max()))
    print(json.dumps({"device": args.device, "cases": len(cases), "tokens_differ": differ,
                      "largest_score_difference": largest}))  # fmt: skip


if __name__ == "__main__":
    main()
