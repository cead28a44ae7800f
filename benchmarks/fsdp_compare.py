"""Compare `aayn.train` runs given as NAME=FOLDER (an FSDP2 run under `accelerate launch`, the plain run of the same
recipe, a run resumed from a checkpoint): the losses at each logging step (each run against the first), speed, test
scores; each final folder loaded with `from_pretrained` (§3.4's matrix one parameter in its four holders) and, in a
fresh process without aayn, through its own code (`auto_map`), its files against the plain run's; the final
weights against the first run's. The GPU check of docs/measurements.md (GPU):

    python benchmarks/fsdp_compare.py fsdp2=runs/fsdp plain=runs/plain fsdp2-resumed=runs/fsdp-resumed
"""

import json
import subprocess
import sys
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM

import aayn  # noqa: F401  registration


def losses(run: Path) -> dict:
    marks = list(run.glob("checkpoint-*"))
    if not marks:
        return {}
    last = max(marks, key=lambda p: int(p.name.split("-")[1]))
    history = json.loads((last / "trainer_state.json").read_text())["log_history"]
    return {row["step"]: row["loss"] for row in history if "loss" in row}


runs = dict(arg.split("=", 1) for arg in sys.argv[1:])
runs = {name: Path(path) for name, path in runs.items()}
table = {name: losses(run) for name, run in runs.items()}
names = list(runs)
steps = sorted(set().union(*table.values()))
print("step " + " ".join(f"{n:>16}" for n in names))
for step in steps:
    print(f"{step:4d} " + " ".join(f"{table[n].get(step, float('nan')):16.6f}" for n in names))
first = names[0]
for other in names[1:]:
    common = [s for s in steps if s in table[first] and s in table[other]]
    rel = max((abs(table[first][s] - table[other][s]) / abs(table[first][s]) for s in common), default=float("nan"))
    print(f"{other} vs {first}: max relative loss difference {rel:.2e} over steps {common}")
states = {}
for name, run in runs.items():
    path = run / "all_results.json"
    r = json.loads(path.read_text()) if path.exists() else {}
    names = ("train_runtime", "train_steps_per_second", "train_loss", "test_bleu", "test_loss")
    keep = {k: r[k] for k in names if k in r}
    print(name, json.dumps(keep))
    if not (run / "config.json").exists():
        print(f"{name}: no final folder")
        continue
    model = AutoModelForSeq2SeqLM.from_pretrained(run)
    inner = model.model
    holders = [inner.shared, inner.encoder.embed.embed_tokens, inner.decoder.embed.embed_tokens, model.lm_head]
    one = len({id(h.weight) for h in holders})
    count = sum(p.numel() for p in model.parameters())
    print(f"{name}: loads ({type(model).__name__}), {count} parameters, its four holders share {one} parameter(s)")
    states[name] = model.state_dict()
    auto_map = json.loads((run / "config.json").read_text()).get("auto_map", {}).get("AutoModelForSeq2SeqLM")
    script = (
        "import sys; from transformers import AutoModelForSeq2SeqLM; "
        f"m = AutoModelForSeq2SeqLM.from_pretrained({str(run)!r}, trust_remote_code=True); "
        "print(type(m).__name__, 'aayn' in sys.modules)"
    )
    fresh = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd="/")
    said = fresh.stdout.strip() or fresh.stderr.strip().splitlines()[-1:]
    print(f"{name}: auto_map {auto_map}; without aayn: {said}")
    if "plain" in runs and name != "plain" and (runs["plain"] / "config.json").exists():
        files = [{path.name for path in folder.iterdir()} for folder in (run, runs["plain"])]
        extra, missing = sorted(files[0] - files[1]), sorted(files[1] - files[0])
        print(f"{name}: files not in plain's folder {extra}, missing {missing}")
for name in list(states)[1:]:
    diff = max((states[name][k].float() - states[first][k].float()).abs().max().item() for k in states[first])
    print(f"final weights, {name} vs {first}: max abs difference {diff:.3e}")
