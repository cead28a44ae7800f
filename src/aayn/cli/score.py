"""`aayn score`: given translations scored, log P and the search's normalized score."""

from __future__ import annotations

import argparse

from .arguments import alignment_arguments, batch_tokens_argument, device_argument, engine_options, read_lines


def score(args: argparse.Namespace) -> None:
    """Score given translations: per line pair, log P(target | source) (eos included) and the length-normalized
    score the paper's search ranks by, tab-separated, in input order (--per_token: each target token's too)."""
    from ..translation.opening import open_translator

    sources, targets = (read_lines(path, flag) for path, flag in ((args.source, "--source"), (args.target, "--target")))
    if len(sources) != len(targets):
        raise ValueError(f"--source {args.source} has {len(sources)} lines, --target {args.target} {len(targets)}")
    alignment = None
    if args.print_alignment:
        from ..formats.alignment import AlignmentSettings

        alignment = AlignmentSettings(args.alignment_layer, args.alignment_heads)
    needs = ("scores",) + ("alignment",) * bool(alignment)
    for flag in ("cuda_graphs", "compiled_steps"):
        if getattr(args, flag):
            raise ValueError(f"--{flag} runs a search's decoder steps otherwise: aayn score runs no search")
    translator = open_translator([args.model], args.device, needs=needs, options=engine_options(args))
    scores = translator.score(
        sources, targets, length_penalty=args.length_penalty, per_token=args.per_token,
        batch_tokens=args.batch_tokens, alignment=alignment,
    )  # fmt: skip
    for pair in scores:
        if args.print_alignment == "json":
            import json

            fields = {"log_prob": pair.log_prob, "score": pair.score}
            fields.update({"tokens": pair.tokens} if args.per_token else {})
            print(json.dumps({**fields, **pair.alignment.as_dict()}, ensure_ascii=False))
            continue
        columns = [f"{pair.log_prob:.6f}", f"{pair.score:.6f}"]
        if args.per_token:
            columns.append(" ".join(f"{value:.6f}" for value in pair.tokens))
        if alignment is not None:
            columns.append(pair.alignment.pairs())
        print("\t".join(columns))


def score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="saved model folder or Hub id")
    parser.add_argument("--source", required=True, help="source sentences, one per line (- for standard input)")
    parser.add_argument("--target", required=True, help="their translations, one per line, aligned with --source")
    parser.add_argument("--length_penalty", type=float, help="alpha of the score's normalization (default: model's)")
    parser.add_argument("--per_token", action="store_true", help="a third column: each target token's log P")
    alignment_arguments(parser)
    batch_tokens_argument(parser, "padded tokens per batch")
    device_argument(parser)


TRANSFORMERS = "quiet"  # when transformers is set up (`aayn.cli.COMMANDS`)


run, arguments = score, score_arguments
