"""`aayn evaluate`: BLEU and chrF of a saved model on a dataset split."""

from __future__ import annotations

import argparse

from .arguments import decoding_arguments, engine_options, generate_options, positive_int


def evaluate(args: argparse.Namespace) -> None:
    """Print BLEU, chrF (sacreBLEU) and their signatures for a saved model on a dataset split, as JSON: of one
    direction, or of each pair a multilingual folder states (`--lang_pairs`) with their mean."""
    import json

    from ..checks import check_device, check_direction
    from ..translation.evaluation import evaluate_model
    from ..translation.opening import locate_model

    check_device(args.device)
    if len(args.model) != 1:
        raise ValueError(f"aayn evaluate scores one model; got {len(args.model)} --model (ensembles: aayn translate)")
    folder = locate_model(args.model[0])  # its kind decided here, once
    pairs = evaluated_pairs(folder.location, args.source_lang, args.target_lang, args.lang_pairs)
    scores = {}
    for source_lang, target_lang in pairs:
        check_direction(folder.location, source_lang, target_lang, insist=args.any_direction)
        output = args.output if len(pairs) == 1 or args.output is None else f"{args.output}.{source_lang}-{target_lang}"
        scores[f"{source_lang}-{target_lang}"] = evaluate_model(
            folder,
            args.dataset_name,
            dataset_config_name=args.dataset_config_name,
            source_lang=source_lang,
            target_lang=target_lang,
            split=args.split,
            max_samples=args.max_samples,
            batch_tokens=args.batch_tokens,
            device=args.device,
            options=engine_options(args),
            output=output,
            pivot=args.pivot,
            **generate_options(args),
        )
    if len(pairs) == 1:
        print(json.dumps(next(iter(scores.values())), indent=2))
        return
    means = {key: sum(pair[key] for pair in scores.values()) / len(scores)
             for key in ("bleu", "chrf", "off_target") if all(key in pair for pair in scores.values())}  # fmt: skip
    print(json.dumps({**scores, "mean": means}, indent=2))


def evaluated_pairs(location: str, source_lang, target_lang, lang_pairs) -> list[tuple[str, str]]:
    """The directions to score: the one given, else `lang_pairs` (a list, or "all": every pair the folder states),
    else, where neither is given, every pair the folder states."""
    from ..languages import folder_lang_pairs, parse_lang_pairs

    if (source_lang is None) != (target_lang is None):
        raise ValueError("give both --source_lang and --target_lang, or neither (then every pair the folder states)")
    if source_lang is not None:
        if lang_pairs is not None:
            raise ValueError("give --lang_pairs or --source_lang/--target_lang, not both")
        return [(source_lang, target_lang)]
    stated = folder_lang_pairs(location)
    if lang_pairs is not None and lang_pairs != "all":
        return parse_lang_pairs(lang_pairs)
    if not stated:
        raise ValueError(f"{location} states no pairs (one trained on one pair): give --source_lang and --target_lang")
    return stated


def evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    decoding_arguments(parser)
    parser.add_argument("--dataset_name", required=True, help='Hub id, local folder, or "bible"')
    parser.add_argument("--dataset_config_name")
    parser.add_argument("--source_lang", help="with --target_lang, the direction to score")
    parser.add_argument("--target_lang")
    parser.add_argument(
        "--lang_pairs",
        metavar="PAIRS",
        help='pairs to score, "en-es,en-fr", or "all": each pair the folder states (the default without a direction)',
    )
    parser.add_argument("--split", default="test", help="split expression, slicing allowed (default: test)")
    parser.add_argument("--max_samples", type=positive_int)
    parser.add_argument("--pivot", metavar="LANG", help="translate through LANG by two trained directions")
    parser.add_argument("--output", metavar="FILE", help="also write the translations there, one line per sentence")
    parser.add_argument(
        "--any_direction", action="store_true", help="score a model whose card names another direction (a warning)"
    )


TRANSFORMERS = "quiet"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = evaluate, evaluate_arguments
