"""What a saved folder needs for the Hub besides weights, config and code: the model card (from model_card.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from .model.policy_aayn import LICENSE

if TYPE_CHECKING:  # an annotation only: reading a card (`aayn serve` of a CTranslate2 export) needs no torch
    from transformers import PreTrainedModel

TEMPLATE = Path(__file__).parent / "model_card.md"


def render_model_card(
    model: PreTrainedModel,
    *,
    source_lang: str,
    target_lang: str,
    dataset: str,
    repo_id: str,
    example: str,
    training: str,
    results: dict[str, float] | None = None,
    license: str = LICENSE,
    made_with: str = "trained with [aayn](https://pypi.org/project/aayn/)",
    lang_pairs: list[str] | None = None,
) -> str:
    """`model_card.md` filled in: Hub YAML metadata (languages, license, dataset, metrics and values) and body.
    `made_with`: how the weights came to be (an imported folder says where from)."""
    config = model.config
    vocabulary = described_vocabulary(config, lang_pairs)
    results = results or {}
    metrics = sorted(name for name in ("bleu", "chrf") if name in results)
    model_index = (
        [
            {
                "name": repo_id.split("/")[-1],
                "results": [
                    {
                        "task": {"type": "translation", "name": f"Translation {source_lang}-{target_lang}"},
                        "dataset": {"name": dataset, "type": dataset},
                        "metrics": [
                            {"type": name, "value": round(results[name], 2), "name": name.upper()} for name in metrics
                        ],
                    }
                ],
            }
        ]
        if metrics
        else []
    )
    evaluation = (
        "\n".join(f"- {name.upper()}: {results[name]:.2f} (sacreBLEU, detokenized)" for name in metrics)
        if metrics
        else "Not evaluated yet."
    )
    if metrics:
        import sacrebleu

        signatures = []
        for scorer in (sacrebleu.BLEU(), sacrebleu.CHRF()):
            scorer.corpus_score(["a"], [["a"]])  # a signature names the reference count, known after one score
            signatures.append(f"`{scorer.get_signature()}`")
        evaluation += f"\n\nsacreBLEU signatures: {', '.join(signatures)}"
    evaluation = each_pair(evaluation, lang_pairs, results)
    languages = [source_lang, target_lang]
    if lang_pairs:
        languages = list(dict.fromkeys(lang for pair in lang_pairs for lang in pair.split("-")))
    values = {  # metadata values as JSON, which YAML reads as written whatever characters they hold
        "languages": json.dumps(languages),
        "license": json.dumps(license),
        "widget": json.dumps([{"text": example}], ensure_ascii=False),
        "datasets": json.dumps([dataset]),
        "metrics": json.dumps(metrics),
        "model_index": json.dumps(model_index, ensure_ascii=False),
        "model_name": repo_id.split("/")[-1],
        "d_model": config.d_model,
        "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers,
        "attention_heads": config.encoder_attention_heads,
        "ffn_dim": config.encoder_ffn_dim,
        "parameters": f"{model.num_parameters():,}",
        "norm": "pre" if getattr(config, "norm_first", False) else "post",
        "vocabulary": vocabulary,
        "made_with": made_with,
        "repo_id": repo_id,
        "example": json.dumps(example, ensure_ascii=False),  # a valid Python string literal too
        "training": training,
        "evaluation": evaluation,
    }
    return TEMPLATE.read_text(encoding="utf-8").format(**values)


def write_model_card(folder: str | Path, model: PreTrainedModel, **card) -> Path:
    path = Path(folder) / "README.md"
    path.write_text(render_model_card(model, **card), encoding="utf-8")
    return path


def described_vocabulary(config, lang_pairs: list[str] | None) -> str:
    """The card's words for the vocabulary, and for a model of several pairs, the token that chooses each."""
    vocabulary = (
        f"one shared {config.vocab_size}-token vocabulary"
        if config.decoder_vocab_size == config.vocab_size and getattr(config, "share_encoder_decoder_embeddings", True)
        else f"a {config.vocab_size}-token source and a {config.decoder_vocab_size}-token target vocabulary"
    )
    if lang_pairs:  # one model for several pairs: the target chosen by its token before the source
        tokens = ", ".join(f"{pair} (`>>{pair.split('-')[1]}<<`)" for pair in lang_pairs)
        vocabulary += f"; one model for the pairs {tokens}, the target's token put before each source text"
    return vocabulary


def each_pair(evaluation: str, lang_pairs: list[str] | None, results: dict) -> str:
    """The card's evaluation with each pair's scores (a model of several pairs: the scores above are their means)."""
    pairs = [pair for pair in lang_pairs or () if f"bleu_{pair}" in results]
    if not pairs:
        return evaluation
    return (
        "The means over the pairs:\n"
        + evaluation
        + "\n\nEach pair:\n\n"
        + "\n".join(
            f"- {pair}: BLEU {results[f'bleu_{pair}']:.2f}, chrF {results[f'chrf_{pair}']:.2f}"
            + (f", off target {results[f'off_target_{pair}']:.1%}" if f"off_target_{pair}" in results else "")
            for pair in pairs
        )
    )


def front_matter(folder: str | Path) -> dict | None:
    """A folder's model card's YAML metadata (the Hub's front matter of README.md); None where it has none."""
    import yaml

    readme = Path(folder) / "README.md"
    if not readme.is_file():
        return None
    text = readme.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return None
    return yaml.safe_load(text.split("---\n")[1]) or {}


def card_metadata(folder: str | Path) -> dict | None:
    """The languages, dataset, license and example of an aayn model card (its YAML metadata), to carry over to a
    folder made from this one; None where the folder has no aayn card."""
    meta = front_matter(folder)
    if meta is None:
        return None
    languages = meta.get("language") or []
    if "aayn" not in (meta.get("tags") or []) or len(languages) != 2:
        return None
    return {
        "source_lang": languages[0],
        "target_lang": languages[1],
        "dataset": (meta.get("datasets") or ["unknown"])[0],
        "license": meta.get("license", LICENSE),
        "example": ((meta.get("widget") or [{}])[0]).get("text", ""),
    }
