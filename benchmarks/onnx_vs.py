"""The demo model's test verses decoded greedily by torch (aayn), CTranslate2 float32 (`aayn export --format
ctranslate2`) and ONNX Runtime float32 / int8 (`aayn export --format onnx`), side by side in one run: size of the
weights on disk, seconds per round (median of the rounds, the arms alternating), and how many outputs equal
torch's.

    python benchmarks/onnx_vs.py --model runs/demo-bible-en-fr [--verses 256] [--rounds 3] [--num_beams 1]

Greedy by default; with --num_beams k, torch and ONNX Runtime run §6.1's search (alpha 0.6) and CTranslate2 its own
beam search (log P / |Y|^0.6, so its outputs may differ). Each engine uses the process's cores (torch's threads,
CTranslate2's and ONNX Runtime's intra-op threads at their defaults); batches are `aayn translate`'s (similar
lengths, 4096 padded tokens).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def size_mb(paths: list[Path]) -> float:
    return sum(path.stat().st_size for path in paths) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a saved aayn folder (the demo job's)")
    parser.add_argument("--verses", type=int, default=256, help="the first N verses of the Bible test split")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num_beams", type=int, default=1)
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args()

    from aayn.data import load_translation_dataset
    from aayn.formats import export_model
    from aayn.formats.ctranslate2.engine import ExportedModel
    from aayn.formats.onnx.engine import FILES, OnnxTranslator
    from aayn.translation.opening import open_translator

    test = load_translation_dataset("bible", source_lang="en", target_lang="fr", splits={"test": "test"})["test"]
    verses = [row["en"] for row in test["translation"][: args.verses]]
    work = Path(tempfile.mkdtemp(prefix="onnx-vs-"))
    export_model(args.model, work / "ct2")
    export_model(args.model, work / "onnx", format="onnx")
    export_model(args.model, work / "onnx-int8", format="onnx", quantization="int8")
    arms = {
        "torch float32 (aayn)": (open_translator([args.model]), [Path(args.model, "model.safetensors")]),
        "CTranslate2 float32": (ExportedModel(work / "ct2"), [work / "ct2" / "model.bin"]),
        "ONNX Runtime float32": (OnnxTranslator(work / "onnx"), [work / "onnx" / name for name in FILES]),
        "ONNX Runtime int8": (OnnxTranslator(work / "onnx-int8"), [work / "onnx-int8" / name for name in FILES]),
    }
    times: dict[str, list[float]] = {name: [] for name in arms}
    outputs: dict[str, list[str]] = {}
    for _ in range(args.rounds):
        for name, (engine, _) in arms.items():
            start = time.perf_counter()
            texts = engine.translate(verses, num_beams=args.num_beams, length_penalty=0.6)
            times[name].append(time.perf_counter() - start)
            outputs[name] = texts
    reference = outputs["torch float32 (aayn)"]
    rows = []
    for name, (_, files) in arms.items():
        same = sum(a == b for a, b in zip(outputs[name], reference))
        rows.append({"engine": name, "weights_mb": round(size_mb(files), 1), "seconds": times[name],
                     "median_s": round(statistics.median(times[name]), 2), "equal_to_torch": same})  # fmt: skip
    torch_median = rows[0]["median_s"]
    search = "greedy" if args.num_beams == 1 else f"beam {args.num_beams}, alpha 0.6"
    print(f"{len(verses)} test verses, {search}, {args.rounds} rounds alternating; model {args.model}")
    print("| engine | weights (MB) | median s | speed vs torch | outputs equal to torch's |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        speed = torch_median / row["median_s"]
        print(f"| {row['engine']} | {row['weights_mb']} | {row['median_s']} | {speed:.2f}x | "
              f"{row['equal_to_torch']}/{len(verses)} |")  # fmt: skip
    if args.json:
        report = {"verses": len(verses), "num_beams": args.num_beams, "rows": rows}
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
