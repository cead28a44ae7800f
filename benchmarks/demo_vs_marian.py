"""The demo recipe trained twice per seed in one run: AAYN, then transformers' MarianMTModel of the same shape.

    python benchmarks/demo_vs_marian.py [recipes/demo.yaml] [--seeds 1,2,3] [--arms aayn,marian]
                                        [--aayn_init marian] [--key value ...]

Same recipe, data, tokenizer, seed, steps and Trainer; only the model class differs (MarianMTModel configured by
`aayn.formats.marian.weights.marian_config_for`: same widths, layers, heads, vocabulary, sinusoidal positions,
post-norm, scaled and tied embeddings, N(0, init_std) weights). Each model decodes the test split its own way with the
recipe's
beams and length penalty (AAYN: the paper's beam search, GNMT's penalty; Marian: transformers' beam search).
One seed cannot separate two models that learn equally fast, so `--seeds` trains both arms once per seed
(alternating) and prints every run and the mean. Prints test BLEU / chrF / loss and wall time of each.

`--aayn_init marian` pairs the arms: AAYN starts from the very weights Marian's arm draws for the same seed
(mapped by `aayn.formats.marian.weights.aayn_state_dict_from_marian`), so what is left between them is the model code,
dropout masks and rounding, not the luck of the initial draw. `--arms` runs only some arms (e.g. `--arms aayn`).
"""

import copy
import dataclasses
import json
import statistics
import sys
import time

from transformers import MarianMTModel

from aayn.cli.arguments import setup_logging
from aayn.formats.marian.weights import aayn_state_dict_from_marian, marian_config_for
from aayn.training.arguments import parse_arguments
from aayn.training.job import run_plan
from aayn.training.model import build_model
from aayn.training.plan import RunPlan, plan_run


def marian(plan: RunPlan, tokenizer):
    config = marian_config_for(build_model(plan, tokenizer).config)
    config._attn_implementation = plan.model_args.attn_implementation
    return MarianMTModel(config)


def marian_plan(plan: RunPlan) -> RunPlan:
    """The run's plan for the Marian arm: the Trainer's smoother takes the loss (MarianMTModel has no loss of its
    own), and transformers' search gets a length limit (its default is 20 tokens; aayn's keeps §6.1's source + 50)."""
    args = copy.copy(plan.args)
    args.label_smoothing_factor = plan.label_smoothing
    args.generation_max_length = args.generation_max_length or plan.data_args.max_target_length
    generation = {**plan.generation, "max_length": args.generation_max_length}
    return dataclasses.replace(plan, args=args, generation=generation)


def aayn_from_marians_init(plan: RunPlan, tokenizer):
    """AAYN holding the initial weights that the Marian arm draws for this seed (the same calls, in order)."""
    reference = marian(plan, tokenizer)
    model = build_model(plan, tokenizer)
    missing, unexpected = model.load_state_dict(aayn_state_dict_from_marian(reference), strict=False)
    tied = set(model._tied_weights_keys)  # the tied copies of model.shared.weight
    if unexpected or set(missing) - tied:
        raise RuntimeError(f"Marian's weights do not map onto AAYN: missing {missing}, unexpected {unexpected}")
    return model


def pop_option(argv: list[str], flag: str, parse, example: str):
    """(argv without `flag VALUE`, parse(VALUE)) or (argv, None) where the flag is absent."""
    if flag not in argv:
        return argv, None
    i = argv.index(flag)
    try:
        value = parse(argv[i + 1])
    except (IndexError, ValueError) as error:
        raise SystemExit(
            f"{flag}: {error if isinstance(error, ValueError) else 'missing value'}; e.g. {example}"
        ) from None
    return argv[:i] + argv[i + 2 :], value


def integers(text: str) -> list[int]:
    return [int(s) for s in text.split(",")]


def choices(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        chosen = text.split(",")
        if not chosen or any(c not in allowed for c in chosen):
            raise ValueError(f"choose from {', '.join(allowed)}, got {text!r}")
        return chosen

    return parse


def main():
    setup_logging()
    argv, seeds = pop_option(sys.argv[1:], "--seeds", integers, "--seeds 1,2,3")
    argv, arms = pop_option(argv, "--arms", choices(("aayn", "marian")), "--arms aayn")
    argv, init = pop_option(argv, "--aayn_init", choices(("marian",)), "--aayn_init marian")
    builders = {"aayn": aayn_from_marians_init if init else build_model, "marian": marian}
    if not argv or argv[0].startswith("--"):  # no recipe given: the demo's
        argv = ["recipes/demo.yaml", *argv]
    rows = []
    for seed in seeds or [None]:
        for name in arms or builders:
            extra = [] if seed is None else ["--seed", str(seed)]
            label = name + ("-from-marian-init" if name == "aayn" and init else "")
            out = f"runs/demo-vs-marian/{label}" + ("" if seed is None else f"-seed{seed}")
            model_args, data_args, args = parse_arguments([*argv, *extra, "--output_dir", out])
            start = time.perf_counter()
            plan = plan_run(model_args, data_args, args)
            metrics = run_plan(marian_plan(plan) if name == "marian" else plan, model_builder=builders[name])
            rows.append(
                {
                    "model": label,
                    "seed": args.seed,
                    "bleu": metrics["test_bleu"],
                    "chrf": metrics["test_chrf"],
                    "loss": metrics["test_loss"],
                    "minutes": (time.perf_counter() - start) / 60,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print("| model | seed | test BLEU | test chrF | test loss | wall time |\n| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['model']} | {row['seed']} | {row['bleu']:.2f} | {row['chrf']:.2f} | {row['loss']:.3f} "
            f"| {row['minutes']:.1f} min |"
        )
    if len(rows) > len({row["model"] for row in rows}):
        for name in dict.fromkeys(row["model"] for row in rows):
            mine = [r for r in rows if r["model"] == name]
            mean = {k: statistics.mean(r[k] for r in mine) for k in ("bleu", "chrf", "loss", "minutes")}
            print(
                f"| {name} | mean of {len(mine)} | {mean['bleu']:.2f} | {mean['chrf']:.2f} | {mean['loss']:.3f} "
                f"| {mean['minutes']:.1f} min |"
            )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
