"""Paragraphs on a sentence-level model: the Bible test split's first `--verses` verses joined into paragraphs of
3 to 6 verses (sizes drawn with a fixed seed; sources and references joined with a space), translated three ways
by the same translator: each paragraph whole (one text, as a server that does not split sends it), split into
sentences by `aayn.translation.sentences` (what `aayn serve` and `aayn translate --split_sentences` do: pysbd's English
rules, blind to where verses end), and verse by verse (the verses as the corpus gives them: the oracle split). BLEU and
chrF (sacreBLEU) of the paragraphs against the joined references, the length ratio, and the sentences the splitter
found against the verses there are.

    python benchmarks/paragraphs.py --model runs/demo-bible-en-fr --verses 600
"""

from __future__ import annotations

import argparse
import json
import random


def paragraphs(count: int, seed: int = 0) -> list[tuple[int, int]]:
    """(start, end) of each paragraph over `count` verses: 3 to 6 verses each, the last one what is left."""
    rng, spans, start = random.Random(seed), [], 0
    while start < count:
        end = min(count, start + rng.randint(3, 6))
        spans.append((start, end))
        start = end
    return spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/demo-bible-en-fr")
    parser.add_argument("--verses", type=int, default=600)
    parser.add_argument("--output", help="a JSON file for the figures")
    args = parser.parse_args()

    import sacrebleu

    from aayn.data import load_translation_dataset
    from aayn.translation.opening import open_translator
    from aayn.translation.sentences import Sentences, splitter

    test = load_translation_dataset("bible", source_lang="en", target_lang="fr", splits={"test": "test"})["test"]
    rows = test["translation"][: args.verses]
    sources, references = [row["en"] for row in rows], [row["fr"] for row in rows]
    spans = paragraphs(len(rows))
    joined = [" ".join(sources[a:b]) for a, b in spans]
    wanted = [" ".join(references[a:b]) for a, b in spans]
    translator = open_translator([args.model])

    whole = translator.translate(joined)
    verses = translator.translate(sources)
    by_verse = [" ".join(verses[a:b]) for a, b in spans]
    documents = [Sentences(text, splitter("en")) for text in joined]
    found = [text for document in documents for text in document.texts]
    translated, split, start = translator.translate(found), [], 0
    for document in documents:
        split.append(document.rebuilt(translated[start : start + len(document.texts)]))
        start += len(document.texts)

    report = {"model": args.model, "verses": len(rows), "paragraphs": len(spans), "sentences_found": len(found)}
    reference_words = sum(len(text.split()) for text in wanted)
    for arm, outputs in (("whole", whole), ("split", split), ("verse_by_verse", by_verse)):
        report[arm] = {
            "bleu": round(sacrebleu.corpus_bleu(outputs, [wanted]).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(outputs, [wanted]).score, 2),
            "length_ratio": round(sum(len(text.split()) for text in outputs) / reference_words, 3),
        }
    print(json.dumps(report, indent=1))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            json.dump(report, file, indent=1)


if __name__ == "__main__":
    main()
