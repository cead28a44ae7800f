"""A glossary on the demo model: 20 terms drawn from the Bible test split's references, and the translations of the
test verses with and without it: how often the target term of a source term found in a verse is in its
translation (term use), BLEU against the references, and sentences per second (the two arms alternated).

The terms: of the words (four letters or more) of the first `--verses` verses, each source word's most associated
reference word by the Dice coefficient of the verses they occur in (at least 5 verses each), the 20 pairs of
highest Dice whose target word differs from the source word (the words a translator must get right: names and
frequent nouns).

    python benchmarks/glossary.py --model runs/demo-bible-en-fr --verses 512 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections import Counter

WORD = re.compile(r"\w{4,}")


def draw_terms(sources: list[str], references: list[str], count: int) -> list[tuple[str, str]]:
    """`count` (source word, target word) pairs of highest Dice coefficient over the verses."""
    source_sets = [set(WORD.findall(text)) for text in sources]
    target_sets = [set(WORD.findall(text)) for text in references]
    source_counts, target_counts = Counter(), Counter()
    both = Counter()
    for words, targets in zip(source_sets, target_sets):
        source_counts.update(words)
        target_counts.update(targets)
        both.update((s, t) for s in words for t in targets)
    best = {}
    for (source, target), together in both.items():
        if source_counts[source] >= 5 and target_counts[target] >= 5 and source.lower() != target.lower():
            dice = 2 * together / (source_counts[source] + target_counts[target])
            if dice > best.get(source, (0.0, ""))[0]:
                best[source] = (dice, target)
    ranked = sorted(best.items(), key=lambda item: -item[1][0])
    chosen, targets = [], set()
    for source, (_, target) in ranked:
        if target not in targets:
            chosen.append((source, target))
            targets.add(target)
        if len(chosen) == count:
            break
    return chosen


def term_use(glossary, sources: list[str], outputs: list[str]) -> tuple[int, int]:
    """(terms found in a translation, terms that apply), over the verses."""
    used = applied = 0
    for source, output in zip(sources, outputs):
        words = set(re.findall(r"\w+|[^\w\s]", output))
        for term in glossary.terms_for(source):
            applied += 1
            used += all(word in words for word in re.findall(r"\w+|[^\w\s]", term))
    return used, applied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/demo-bible-en-fr")
    parser.add_argument("--verses", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--terms", type=int, default=20)
    parser.add_argument("--output", help="write the figures as JSON here too")
    args = parser.parse_args()

    import sacrebleu
    import torch

    from aayn.data import load_translation_dataset
    from aayn.model.glossary_aayn import Glossary
    from aayn.translation.opening import open_translator

    torch.set_num_threads(2)
    test = load_translation_dataset("bible", source_lang="en", target_lang="fr", splits={"test": "test"})["test"]
    rows = test["translation"][: args.verses]
    sources, references = [row["en"] for row in rows], [row["fr"] for row in rows]
    glossary = Glossary(tuple(draw_terms(sources, references, args.terms)))
    translator = open_translator([args.model])
    outputs, seconds = {}, {"without": [], "with": []}
    for _ in range(args.rounds):
        for arm in ("without", "with"):
            start = time.perf_counter()
            outputs[arm] = translator.translate(sources, glossary=glossary if arm == "with" else None)
            seconds[arm].append(time.perf_counter() - start)
    report = {"model": args.model, "verses": len(sources), "terms": [list(entry) for entry in glossary.entries]}
    applies = [i for i, source in enumerate(sources) if glossary.terms_for(source)]
    for arm in ("without", "with"):
        used, applied = term_use(glossary, sources, outputs[arm])
        report[arm] = {
            "term_use": f"{used}/{applied}",
            "term_use_rate": used / max(applied, 1),
            "bleu": sacrebleu.corpus_bleu(outputs[arm], [references]).score,
            "bleu_verses_with_terms": sacrebleu.corpus_bleu(
                [outputs[arm][i] for i in applies], [[references[i] for i in applies]]
            ).score,
            "seconds_median": statistics.median(seconds[arm]),
            "seconds": seconds[arm],
            "sentences_per_second": len(sources) / statistics.median(seconds[arm]),
        }
    report["verses_with_terms"] = len(applies)
    text = json.dumps(report, ensure_ascii=False, indent=1)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(text + "\n")


if __name__ == "__main__":
    main()
