"""BLEU as the paper's WMT 2014 EN-DE numbers were computed (tensor2tensor's `get_ende_bleu.sh`): both sides
Moses-tokenized (`tokenizer.perl -l de`), compounds split at their hyphens (`s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g`),
then `multi-bleu.perl`: corpus BLEU on those tokens, case-sensitive, no smoothing. It is not sacreBLEU's (detokenized,
13a): the two are reported side by side, labelled, so that a model's result can be set against the paper's 27.3.
Needs `sacremoses` (a dependency of aayn)."""

from __future__ import annotations

import re

COMPOUND = re.compile(r"(\S)-(\S)")


def atat(text: str) -> str:
    """Compound splitting as get_ende_bleu.sh's perl one-liner (non-overlapping, left to right, as perl's /g)."""
    return COMPOUND.sub(r"\1 ##AT##-##AT## \2", text)


def tokenized_for_paper_bleu(texts: list[str], lang: str = "de") -> list[str]:
    """Moses tokenization (with its escaping, as tokenizer.perl's default) then compound splitting."""
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)
    return [atat(tokenizer.tokenize(text, return_str=True, escape=True)) for text in texts]


def paper_bleu(hypotheses: list[str], references: list[str], lang: str = "de") -> float:
    """multi-bleu.perl's corpus BLEU of the tokenized, compound-split texts (one reference per sentence)."""
    import sacrebleu

    bleu = sacrebleu.BLEU(tokenize="none", smooth_method="none", force=True)
    hyps, refs = tokenized_for_paper_bleu(hypotheses, lang), tokenized_for_paper_bleu(references, lang)
    return bleu.corpus_score(hyps, [refs]).score


# the target languages whose published WMT numbers were computed this way (the paper's EN-DE)
PAPER_BLEU_LANGUAGES = ("de",)
PAPER_BLEU_SIGNATURE = "moses-tok(-l de)+atat-compound-split|multi-bleu|case-sensitive|no-smoothing"


def paper_bleu_scores(hypotheses: list[str], references: list[str], target_lang: str | None, signature: bool) -> dict:
    """What a translation into `target_lang` adds beside sacreBLEU: `paper_bleu` where the paper's numbers were
    computed so (German), with `paper_bleu_signature` if asked (a report; a trainer's metrics must be numbers);
    nothing into other languages. What `aayn evaluate` and the trainer's metrics both report."""
    if target_lang not in PAPER_BLEU_LANGUAGES:
        return {}
    scores = {"paper_bleu": paper_bleu(hypotheses, references, target_lang)}
    if signature:
        scores["paper_bleu_signature"] = PAPER_BLEU_SIGNATURE
    return scores
