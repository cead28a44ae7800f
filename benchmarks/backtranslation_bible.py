"""Back-translation on the Bible's en-fr: the training books split in two (alternate books), the first half as
parallel pairs, the second half's French alone as monolingual text. A backward model (fr -> en, the demo recipe)
trained on the parallel half translates the monolingual French (`aayn translate --input`, its beam 4); `aayn mix`
puts the synthetic pairs beside the real ones (`--ratio`, default 1), their sources either tagged only (`<BT>`,
Caswell et al. 2019) or tagged and noised (`--noise`, Edunov et al. 2018: words dropped, blanked and swapped), or
drawn by sampling from the backward model (`sampled`: `--sampling --sampling_topk 10`, as fairseq's example) and
tagged;
forward models of the demo recipe (the same batches and seed) train on the parallel half alone and on each
mixture, for each of the `--max_steps` given (a longer run continues the shorter one of its arm). Printed: test
BLEU / chrF of each (the demo's test split, 1,116 verses; with `--alphas`, also with the length penalty chosen on
the validation split, per model) as JSON and a Markdown table. With `--finetune_steps N`, Firefox's curriculum:
the longest run of each arm trained N steps more on the parallel half alone (peak learning rate 0.0005 after 100
warmup steps), the parallel arm too (the control: the same steps at the same rate). Also printed: each
back-translation's BLEU / chrF against the English the even books really hold (OUT/mono/en.txt).

    python benchmarks/backtranslation_bible.py [--out runs/bench-bt] [--max_steps 4500 9000]
        [--synthetic tagged noised sampled] [--no-parallel_arm] [--ratio 1] [--alphas 0.6 1.0 1.4]
        [--finetune_steps 1500] [--halves_only]

Each step's folder is kept under OUT and not redone on a rerun. `--halves_only` writes OUT/parallel (train,
validation and test files) and OUT/mono/fr.txt and stops: the corpus and the monolingual text of
`recipes/pipeline-bible-backtranslation.yaml`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

BACKWARD_STEPS = 4500
FINETUNE = ("--learning_rate", "0.0005", "--warmup_steps", "100")  # the fine-tuning's, as the pipeline recipe's
SAMPLED = ("--sampling", "--sampling_topk", "10")  # fairseq's back-translation example: --sampling --sampling-topk 10
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "demo.yaml"


def aayn(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "aayn.cli", *args], check=True, stdout=subprocess.PIPE,
                          text=True).stdout  # fmt: skip


def train(output: Path, dataset: Path, source: str, target: str, steps: int, earlier: Path | None = None,
          more: tuple = ()) -> Path:  # fmt: skip
    """The demo recipe trained `steps` steps into `output` (`more`: flags after the recipe's); where `earlier` (the
    same arm, fewer steps) is done, a copy of it resumed from its last checkpoint (the inverse square-root schedule
    does not depend on the steps)."""
    if not (output / "config.json").is_file():
        resume = []
        if earlier and (earlier / "config.json").is_file() and not output.exists():
            shutil.copytree(earlier, output)
            resume = ["--resume_from_checkpoint", "true"]
        subprocess.run([sys.executable, "-m", "aayn.train", str(RECIPE), "--dataset_name", str(dataset),
                        "--source_lang", source, "--target_lang", target, "--output_dir", str(output),
                        "--max_steps", str(steps), "--report_to", "none", *resume, *more], check=True)  # fmt: skip
    return output


def books_of_training_verses() -> dict[tuple[str, str], int]:
    """(English, French) text of each verse -> its book number, read as the Bible loader reads them."""
    from aayn.data.bible import bible_verses

    return {(en, fr): book for book, en, fr in bible_verses("en", "fr")}


def write_halves(out: Path) -> tuple[Path, Path]:
    """OUT/parallel (train.en / train.fr of the odd-numbered training books' verses, the demo's validation and test
    splits) and OUT/mono/fr.txt (the even-numbered books' French)."""
    from aayn.data import load_translation_dataset

    parallel, mono = out / "parallel", out / "mono" / "fr.txt"
    if (parallel / "test.fr").is_file() and mono.is_file() and mono.with_name("en.txt").is_file():
        return parallel, mono
    data = load_translation_dataset("bible", source_lang="en", target_lang="fr")
    book = books_of_training_verses()
    train = [(row["en"], row["fr"]) for row in data["train"]["translation"]]
    kept = [pair for pair in train if book[pair] % 2 == 1]
    other = [fr for en, fr in train if book[(en, fr)] % 2 == 0]
    parallel.mkdir(parents=True, exist_ok=True)
    mono.parent.mkdir(parents=True, exist_ok=True)
    for lang, index in (("en", 0), ("fr", 1)):
        (parallel / f"train.{lang}").write_text("".join(pair[index] + "\n" for pair in kept), encoding="utf-8")
        for split in ("validation", "test"):
            lines = [row[lang] for row in data[split]["translation"]]
            (parallel / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    mono.write_text("".join(line + "\n" for line in other), encoding="utf-8")
    english = [en for en, fr in train if book[(en, fr)] % 2 == 0]  # what a back-translation should say
    mono.with_name("en.txt").write_text("".join(line + "\n" for line in english), encoding="utf-8")
    print(f"{len(kept):,} parallel pairs, {len(other):,} monolingual French verses", file=sys.stderr)
    return parallel, mono


def back_translation_quality(folders: dict[str, Path], mono: Path) -> dict:
    """BLEU / chrF of each back-translation (by its search) against the English the even books really hold: how
    far from real sources the synthetic ones are."""
    import sacrebleu

    reference = mono.with_name("en.txt").read_text(encoding="utf-8").splitlines()
    quality = {}
    for search, folder in folders.items():
        made = (folder / mono.name).read_text(encoding="utf-8").splitlines()
        bleu, chrf = sacrebleu.corpus_bleu(made, [reference]), sacrebleu.corpus_chrf(made, [reference])
        quality[search] = {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2)}
    return quality


def scores(model: Path, corpus: Path, alphas: list[float]) -> dict:
    """Test BLEU / chrF with the model's own search (the demo's beam 4, alpha 1.0) and, with `alphas`, with the
    length penalty of them that scores best on the validation split (the paper's §6.1: alpha chosen on the
    development set), each model its own."""

    def evaluated(split: str, *flags: str) -> dict:
        printed = aayn("evaluate", "--model", str(model), "--dataset_name", str(corpus), "--source_lang", "en",
                       "--target_lang", "fr", "--split", split, *flags)  # fmt: skip
        return json.loads(printed[printed.index("{") :])

    result = evaluated("test")
    row = {"bleu": round(result["bleu"], 2), "chrf": round(result["chrf"], 2)}
    if alphas:
        chosen = max(alphas, key=lambda alpha: evaluated("validation", "--length_penalty", str(alpha))["bleu"])
        tuned = evaluated("test", "--length_penalty", str(chosen))
        row.update(alpha=chosen, bleu_tuned=round(tuned["bleu"], 2), chrf_tuned=round(tuned["chrf"], 2))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench-bt")
    parser.add_argument("--max_steps", type=int, nargs="+", default=[4500], help="each forward arm's steps")
    parser.add_argument("--backward_steps", type=int, default=BACKWARD_STEPS, help="the backward model's (another "
                        "than 4500: continued from the 4,500-step one, its arms named -bwSTEPS)")  # fmt: skip
    parser.add_argument("--synthetic", nargs="+", choices=["tagged", "noised", "sampled"], default=["tagged"],
                        help="the synthetic sources tagged only, tagged and noised, or sampled (tagged)")  # fmt: skip
    parser.add_argument("--parallel_arm", action=argparse.BooleanOptionalAction, default=True,
                        help="train the parallel half alone beside the mixtures")  # fmt: skip
    parser.add_argument("--ratio", default="1")
    parser.add_argument("--alphas", type=float, nargs="*", default=[], help="length penalties to choose from on "
                        "the validation split, per model")  # fmt: skip
    parser.add_argument("--finetune_steps", type=int, default=0, help="each arm's longest run then trained this "
                        "many steps on the parallel half alone (the curriculum; the control too)")  # fmt: skip
    parser.add_argument("--halves_only", action="store_true", help="write the two halves and stop")
    args = parser.parse_args()
    out = Path(args.out)
    parallel, mono = write_halves(out)
    if args.halves_only:
        return
    bw = "" if args.backward_steps == BACKWARD_STEPS else f"-bw{args.backward_steps}"  # another backward model's
    backward = out / ("backward" + bw.replace("-bw", "-"))
    backward = train(backward, parallel, "fr", "en", args.backward_steps, earlier=out / "backward" if bw else None)
    mixtures, made = {}, {}
    for kind in args.synthetic:
        searched = "sampled" if kind == "sampled" else "beam"  # the backward model's search: its beam 4, or drawn
        synthetic = made[searched] = out / f"back-translation{'-sampled' * (searched == 'sampled')}{bw}"
        if not (synthetic / mono.name).is_file():
            aayn("translate", "--model", str(backward), "--input", str(mono), "--output_dir", str(synthetic),
                 *(SAMPLED if searched == "sampled" else ()))  # fmt: skip
        kind = kind + bw  # the arm: its kind and its backward model
        mixed = mixtures[kind] = out / f"mixed-{kind}"
        if not (mixed / "report.json").is_file():
            aayn("mix", "--source_lang", "en", "--target_lang", "fr", "--real", str(parallel), "--synthetic_source",
                 str(synthetic), "--synthetic_target", str(mono), "--output", str(mixed), "--ratio", args.ratio,
                 *(["--noise"] if kind.startswith("noised") else []))  # fmt: skip
    arms, before = {}, None
    for steps in sorted(args.max_steps):  # each arm's longer run continues its shorter one
        for kind, data in {**({"parallel": parallel} if args.parallel_arm else {}), **mixtures}.items():
            name = f"parallel half only, {steps} steps" if kind == "parallel" else (
                f"parallel half + other half back-translated ({kind}), {steps} steps")  # fmt: skip
            earlier = out / f"forward-{kind}-{before}" if before else None
            arms[name] = train(out / f"forward-{kind}-{steps}", data, "en", "fr", steps, earlier)
        before = steps
    if args.finetune_steps:  # the curriculum: each arm's longest run trained further on the real pairs alone
        for kind in (*(["parallel"] if args.parallel_arm else []), *mixtures):
            start = out / f"forward-{kind}-{before}"
            more = ("--model_name_or_path", str(start), *FINETUNE)
            name = f"forward-{kind}-{before}-then-{args.finetune_steps}-real"
            arms[f"{kind}, {before} steps, then {args.finetune_steps} on the parallel half"] = train(
                out / name, parallel, "en", "fr", args.finetune_steps, more=more)  # fmt: skip
    results = {name: scores(folder, parallel, args.alphas) for name, folder in arms.items()}
    mixes = {kind: json.loads((mixed / "report.json").read_text()) for kind, mixed in mixtures.items()}
    quality = back_translation_quality(made, mono)
    print(json.dumps({"results": results, "mix": mixes, "back_translations": quality}, indent=2))
    tuned = " | alpha chosen on validation | test BLEU | chrF" if args.alphas else ""
    rule = "|---" * (3 + 3 * bool(args.alphas))
    print(f"\n| forward model (en -> fr) | test BLEU (alpha 1.0) | chrF{tuned} |\n{rule}|")
    for name, row in results.items():
        more = f" | {row['alpha']} | {row['bleu_tuned']} | {row['chrf_tuned']}" if args.alphas else ""
        print(f"| {name} | {row['bleu']} | {row['chrf']}{more} |")
    print("\n| back-translation's search | BLEU against the real English | chrF |\n|---|---|---|")
    for search, row in quality.items():
        print(f"| {search} | {row['bleu']} | {row['chrf']} |")


if __name__ == "__main__":
    main()
