"""What word alignments cost on the demo model: `aayn translate` of the first `--verses` test verses plain, with the
alignments kept by the search as it decodes (`Translator.nbest(alignment=)`), and with a second, teacher-forced
pass after it (what the translators did before the search kept them: `aayn.formats.alignment.align_ids` over the
outputs); the arms alternate, `--rounds` rounds, medians. Checks that the kept alignments equal the second pass's links
(and counts any that differ) and that the translations are those of the plain arm.

    python benchmarks/alignment_cost.py --model runs/demo-bible-en-fr --verses 256 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/demo-bible-en-fr")
    parser.add_argument("--verses", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num_beams", type=int, default=None, help="default: the folder's")
    args = parser.parse_args()

    import torch

    from aayn.data import load_translation_dataset
    from aayn.data.token_batches import padded
    from aayn.formats.aayn.engine import produced
    from aayn.formats.alignment import AlignmentSettings, align_ids
    from aayn.formats.translator import DECODING_BATCH_TOKENS
    from aayn.translation.opening import open_translator

    torch.set_num_threads(2)
    test = load_translation_dataset("bible", source_lang="en", target_lang="fr", splits={"test": "test"})["test"]
    sources = [row["en"] for row in test["translation"][: args.verses]]
    translator = open_translator([args.model])
    model, tokenizer, settings = translator.model, translator.tokenizer, AlignmentSettings()

    @torch.inference_mode()
    def second_pass():  # the search's outputs, then one teacher-forced forward per batch over them
        texts, links = [""] * len(sources), [None] * len(sources)
        options = translator.generate_options(translator.settings(num_beams=args.num_beams))
        for todo, batch, ids in translator._batches(sources, DECODING_BATCH_TOKENS, None):
            out = model.generate(**padded(tokenizer, ids), **options)
            targets = [produced(row, model.config) for row in out.tolist()]
            decoded = tokenizer.batch_decode(out, skip_special_tokens=True)
            for j, text, link in zip(batch, decoded, align_ids(model, tokenizer, ids, targets, settings)):
                texts[todo[j]], links[todo[j]] = text.strip(), link
        return texts, links

    arms = {
        "plain": lambda: (translator.translate(sources, num_beams=args.num_beams), None),
        "kept_by_search": lambda: tuple(
            map(list, zip(*[h[0][1:] for h in translator.nbest(sources, num_beams=args.num_beams, alignment=settings)]))
        ),
        "second_pass": second_pass,
    }
    seconds, outputs = {arm: [] for arm in arms}, {}
    for _ in range(args.rounds):
        for arm, run in arms.items():
            start = time.perf_counter()
            outputs[arm] = run()
            seconds[arm].append(time.perf_counter() - start)
    kept, again = outputs["kept_by_search"][1], outputs["second_pass"][1]
    report = {
        "model": args.model,
        "verses": len(sources),
        "same_translations": outputs["kept_by_search"][0] == outputs["plain"][0] == outputs["second_pass"][0],
        "alignments_that_differ": sum(a.pairs() != b.pairs() for a, b in zip(kept, again)),
        "seconds_median": {arm: statistics.median(values) for arm, values in seconds.items()},
        "seconds": seconds,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
