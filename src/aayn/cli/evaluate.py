"""`aayn evaluate`: BLEU and chrF of a saved model on a dataset split."""

from __future__ import annotations

import argparse

from .arguments import decoding_arguments, engine_options, generate_options, positive_int


def evaluate(args: argparse.Namespace) -> None:
    """Print BLEU, chrF (sacreBLEU) and their signatures for a saved model on a dataset split, as JSON."""
    import json

    from ..checks import check_device, check_direction
    from ..translation.evaluation import evaluate_model
    from ..translation.opening import locate_model

    check_device(args.device)
    if len(args.model) != 1:
        raise ValueError(f"aayn evaluate scores one model; got {len(args.model)} --model (ensembles: aayn translate)")
    folder = locate_model(args.model[0])  # its kind decided here, once
    check_direction(folder.location, args.source_lang, args.target_lang, insist=args.any_direction)
    scores = evaluate_model(
        folder,
        args.dataset_name,
        dataset_config_name=args.dataset_config_name,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        split=args.split,
        max_samples=args.max_samples,
        batch_tokens=args.batch_tokens,
        device=args.device,
        options=engine_options(args),
        output=args.output,
        **generate_options(args),
    )
    print(json.dumps(scores, indent=2))


def evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    decoding_arguments(parser)
    parser.add_argument("--dataset_name", required=True, help='Hub id, local folder, or "bible"')
    parser.add_argument("--dataset_config_name")
    parser.add_argument("--source_lang", required=True)
    parser.add_argument("--target_lang", required=True)
    parser.add_argument("--split", default="test", help="split expression, slicing allowed (default: test)")
    parser.add_argument("--max_samples", type=positive_int)
    parser.add_argument("--output", metavar="FILE", help="also write the translations there, one line per sentence")
    parser.add_argument(
        "--any_direction", action="store_true", help="score a model whose card names another direction (a warning)"
    )


TRANSFORMERS = "quiet"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = evaluate, evaluate_arguments
