"""Alignment error rate of aayn's attention alignments on the English-French Hansards gold alignments
(`../shared/data/enfr-alignment-gold/`: 447 pairs, lowercased and tokenized; sure and possible links): each pair
is read teacher-forced by an English-to-French model (`aayn score --print_alignment`), its subword links mapped to
the gold's words (a piece with a space mark starts a word), and AER computed over the corpus, for every decoder
layer (all heads averaged; fairseq's default is the last layer).

    python benchmarks/alignment_aer.py --model runs/demo-bible-en-fr --gold ../shared/data/enfr-alignment-gold
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="English-to-French model folders (repeat)")
    parser.add_argument("--gold", default="../shared/data/enfr-alignment-gold")
    parser.add_argument("--output", help="write the figures as JSON here too")
    args = parser.parse_args()

    from aayn.formats.alignment import AlignmentSettings, alignment_error_rate, read_gold, word_links
    from aayn.translation.opening import open_translator

    gold = Path(args.gold)
    pairs = [line.split(" ||| ") for line in (gold / "enfr.src-tgt").read_text(encoding="utf-8").splitlines()]
    sources, targets = [p[0].strip() for p in pairs], [p[1].strip() for p in pairs]
    sure, possible = read_gold((gold / "enfr.gold").read_text(encoding="utf-8").splitlines())
    awesome = [{(int(i) + 1, int(j) + 1) for i, j in (link.split("-") for link in line.split())}
               for line in (gold / "enfr.awesome-align.out").read_text(encoding="utf-8").splitlines()]  # fmt: skip
    report = {"pairs": len(pairs), "awesome_align_aer": alignment_error_rate(awesome, sure, possible), "models": {}}
    for name in args.model or ["runs/demo-bible-en-fr"]:
        translator = open_translator([name])
        layers = translator.model.config.decoder_layers
        rows = {}
        for layer in range(layers):
            start = time.perf_counter()
            scored = translator.score(sources, targets, alignment=AlignmentSettings(layer=layer))
            predicted = [{(i + 1, j + 1) for i, j in word_links(pair.alignment)} for pair in scored]
            rows[layer] = {
                "aer": alignment_error_rate(predicted, sure, possible),
                "links_per_pair": sum(map(len, predicted)) / len(predicted),
                "seconds": time.perf_counter() - start,
            }
            print(name, "layer", layer, rows[layer], flush=True)
        report["models"][name] = {"layers": rows, "last_layer_aer": rows[layers - 1]["aer"]}
    text = json.dumps(report, indent=1)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
