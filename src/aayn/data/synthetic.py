"""Back-translated pairs beside real ones: the synthetic sources noised (Edunov et al. 2018: beam outputs with noise
train as well as sampled ones) and tagged (Caswell et al. 2019), mixed with the real pairs at a stated ratio.

The translation itself is `aayn translate --input MONO --output_dir BT` with a reverse model (the bulk path: shards
written whole, a rerun translating only what is missing, on Ray with `--ray`); this module pairs each line of BT
(the synthetic source) with the same line of MONO (the real target) and writes one corpus.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

FILLER = "<blank>"  # the word that replaces a dropped one (Edunov et al.'s filler token)


def noised(text: str, rng: random.Random, *, drop: float = 0.1, blank: float = 0.1, shuffle: int = 3) -> str:
    """Edunov et al.'s noise on one sentence's words: each deleted with chance `drop`, else replaced by `FILLER`
    with chance `blank`, then the words reordered by sorting position i + U(0, shuffle) (a word moves fewer than
    `shuffle` places; Lample et al. 2018). An empty result keeps the sentence."""
    words = []
    for word in text.split():
        chance = rng.random()
        if chance < drop:
            continue
        words.append(FILLER if chance < drop + blank else word)
    keys = [i + rng.uniform(0, shuffle) for i in range(len(words))]
    kept = [word for _, word in sorted(zip(keys, words), key=lambda pair: pair[0])]
    return " ".join(kept) if kept else text


def synthetic_pairs(
    sources: Iterator[str], targets: Iterator[str], *, tag: str = "", noise: bool = False, seed: int = 0
) -> Iterator[tuple[str, str]]:
    """(synthetic source, real target) line by line: the source noised (`noise`, one draw per line from `seed`)
    and `tag` put before it; a blank line on either side is left out."""
    rng = random.Random(seed)
    for source, target in zip(sources, targets, strict=True):
        if not source.strip() or not target.strip():
            continue
        source = noised(source, rng) if noise else source
        yield (f"{tag} {source}" if tag else source), target


def real_copies(real: int, synthetic: int, ratio: float) -> int:
    """How many times the real pairs go into the mixture so that there are about `ratio` synthetic pairs per real
    one, every synthetic pair used (fairseq's upsampling of the real data); at least once: no real pair is left out."""
    if not ratio > 0:
        raise ValueError(f"--ratio must be positive (synthetic pairs per real one), got {ratio}")
    if real < 1 or synthetic < 1:
        raise ValueError(f"mixing needs real and synthetic pairs; got {real:,} real, {synthetic:,} synthetic")
    return max(1, round(synthetic / (ratio * real)))
