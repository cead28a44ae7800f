"""Bulk translation of Bible verses in shards: one `aayn translate --input` process against `--ray` with 1 and 2
actors (a local Ray, started by the command), on an aayn folder and its CTranslate2 export. Each arm runs the whole
command (Ray's start, the model's load and the translation) into a fresh output folder; the arms alternate over
`--rounds`; the wall time of each and the verses per second, and whether every arm's outputs are the same bytes.

    python benchmarks/bulk_ray.py --model runs/demo-bible-en-fr --ct2 runs/demo-ct2 --verses 4000 --shard 500

On a GPU (`--device cuda`): one process on the GPU, one Ray actor holding the GPU, and two actors holding half of it
each (Ray's fractional `num_gpus`), every arm with the same `--batch_tokens`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_shards(folder: Path, verses: int, shard: int) -> None:
    from aayn.data import load_translation_dataset

    data = load_translation_dataset("bible", source_lang="en", target_lang="fr")
    texts = [row["en"] for row in data["train"]["translation"][:verses]]
    folder.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(texts), shard):
        (folder / f"verses-{start // shard:04d}.txt").write_text(
            "".join(f"{t}\n" for t in texts[start : start + shard])
        )


def arms(device: str, batch_tokens: int) -> dict[str, list[str]]:
    """Each arm's flags: on CPU the actors share the 2 cores; on a GPU they share the one GPU."""
    common = ["--device", device, "--batch_tokens", str(batch_tokens)]
    if device.startswith("cuda"):
        one = ["--num_gpus_per_worker", "1", "--num_cpus_per_worker", "2"]
        two = ["--num_gpus_per_worker", "0.5", "--num_cpus_per_worker", "2"]
    else:
        one, two = ["--num_cpus_per_worker", "2"], ["--num_cpus_per_worker", "1"]
    return {"one process": common, "ray, 1 actor": [*common, "--ray", "--concurrency", "1", *one],
            "ray, 2 actors": [*common, "--ray", "--concurrency", "2", *two]}  # fmt: skip


def run(model: str, shards: Path, out: Path, flags: list[str]) -> float:
    command = [sys.executable, "-m", "aayn.cli", "translate", "--model", model, "--input", str(shards), "--output_dir",
               str(out), *flags]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    seconds = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/demo-bible-en-fr")
    parser.add_argument("--ct2", help="its CTranslate2 export (aayn export --format ctranslate2)")
    parser.add_argument("--verses", type=int, default=20_000)
    parser.add_argument("--shard", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--batch_tokens", type=int, default=4096, help="padded source tokens a batch holds")
    parser.add_argument("--output", help="a JSON file for the figures")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bulk-"))
    write_shards(work / "in", args.verses, args.shard)
    flags = arms(args.device, args.batch_tokens)
    report = {"verses": args.verses, "shards": len(list((work / "in").iterdir())), "device": args.device,
              "batch_tokens": args.batch_tokens, "rows": []}  # fmt: skip
    for name, model in (("aayn folder", args.model), ("CTranslate2", args.ct2)):
        if not model:
            continue
        times = {arm: [] for arm in flags}
        for round_ in range(args.rounds):
            for arm, arm_flags in flags.items():
                out = work / f"{name}-{arm}-{round_}".replace(" ", "_").replace(",", "")
                times[arm].append(run(model, work / "in", out, arm_flags))
        outputs = {arm: b"".join(p.read_bytes() for p in sorted((work / f"{name}-{arm}-0".replace(" ", "_")
                                                                    .replace(",", "")).iterdir()))
                   for arm in flags}  # fmt: skip
        same = len(set(outputs.values())) == 1
        for arm in flags:
            seconds = statistics.median(times[arm])
            row = {"model": name, "arm": arm, "seconds": round(seconds, 1),
                   "verses_per_s": round(args.verses / seconds, 1), "same_outputs": same}  # fmt: skip
            report["rows"].append(row)
            print(json.dumps(row))
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
