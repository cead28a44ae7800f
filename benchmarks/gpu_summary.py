"""The tables of a `benchmarks/gpu_figures.sh` run, in markdown for docs/measurements.md, from the files it left in
its OUT folder (env.txt, times.txt, steps.jsonl, trainer.jsonl, decode.jsonl, serve.jsonl, fairseq.jsonl): each
table only where its file has rows.

    python benchmarks/gpu_summary.py OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

STEP_KEYS = ["shape", "dtype", "compiled", "token_budget", "target_tokens", "median_step_ms", "target_tokens_per_s",
             "mfu_real", "mfu_padded", "peak_memory_gib", "host_ms_per_step", "kernel_ms_per_step",
             "launches_per_step", "scalar_reads_per_step", "syncs_per_step"]  # fmt: skip
TRAINER_KEYS = ["shape", "attention", "dtype", "compiled", "token_budget", "workers", "steps_per_s",
                "target_tokens_per_s", "peak_memory_gib", "profiled_step_ms", "host_ms_fetch", "host_ms_training_step",
                "host_ms_optimizer", "host_ms_trainer_rest", "kernel_ms_per_step", "launches_per_step",
                "scalar_reads_per_step", "syncs_per_step", "graphs", "graph_breaks"]  # fmt: skip
DECODE_ARMS = ["aayn_every_step", "aayn", "aayn_graphs", "marian"]
SERVE_KEYS = ["arm", "clients", "overflow_queue", "answered", "sentences_per_second", "p50_s", "p95_s", "p99_s",
              "errors", "errors_503_with_retry_after", "wrong", "sentences_per_model_call"]  # fmt: skip
FAIRSEQ_KEYS = ["row", "shape", "dtype", "token_budget", "new_tokens", "aayn_tokens_per_s", "fairseq_tokens_per_s",
                "aayn_over_fairseq"]  # fmt: skip


def rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.startswith('{"')]  # not the Trainer's own printed dict


def cell(value) -> str:
    """A table's cell: nothing for None, four significant digits for a float."""
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def table(keys: list[str], entries: list[dict]) -> str:
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join(cell(row.get(key)) for key in keys) + " |" for row in entries]
    return "\n".join(lines)


def decoding(entries: list[dict]) -> str:
    """One line per (model, dtype, beams, batch): tokens/s of each arm, the ratios, outputs that differ."""
    flat = []
    for row in entries:
        speeds = row["tokens_per_s"]
        flat.append({
            "model": row["model"], "dtype": row["dtype"], "beams": row["beams"], "batch": row["batch"],
            **{f"{arm} tok/s": speeds.get(arm) for arm in DECODE_ARMS},
            "vs marian": row["vs_marian"], "graphs vs marian": row.get("graphs_vs_marian"),
            "graphs vs aayn": row.get("graphs_vs_aayn"),
            # the graphs arm's warm-up run captures what the timed runs replay
            "graphs first run s / timed s": f"{row.get('first_run_seconds', {}).get('aayn_graphs')} / "
                                            f"{row.get('seconds', {}).get('aayn_graphs')}",
            "graphs kept": row.get("graphs_kept"),
            "differ (every 4 / graphs / marian)": f"{row['differ_every']} / {row.get('differ_graphs')} / "
                                                  f"{row['differ_marian']} of {row['sentences']}",
        })  # fmt: skip
    return table(list(flat[0]), flat)


def main() -> None:
    out = Path(sys.argv[1])
    for name in ("env.txt", "times.txt"):
        if (out / name).is_file():
            print(f"{name}:\n```\n{(out / name).read_text(encoding='utf-8').strip()}\n```\n")
    steps, trainer, fairseq = rows(out / "steps.jsonl"), rows(out / "trainer.jsonl"), rows(out / "fairseq.jsonl")
    decoded, served = rows(out / "decode.jsonl"), [row for row in rows(out / "serve.jsonl") if "arm" in row]
    checks = [row for row in decoded if "cases" in row]
    searches = [row for row in decoded if "tokens_per_s" in row]
    for title, text in (
        ("The bare training step (profile_step.py)", steps and table(STEP_KEYS, steps)),
        ("The Trainer's step (profile_trainer.py)", trainer and table(TRAINER_KEYS, trainer)),
        ("CUDA graphs against the plain steps (graphs_check.py)", checks and table(list(checks[0]), checks)),
        ("Decoding (decode_gpu.py)", searches and decoding(searches)),
        ("aayn serve at 32 clients (serve_load.py)", served and table(SERVE_KEYS, served)),
        ("fairseq 0.12 beside aayn (fairseq_side.py)", fairseq and table(FAIRSEQ_KEYS, fairseq)),
    ):
        if text:
            print(f"{title}:\n\n{text}\n")


if __name__ == "__main__":
    main()
