"""`aayn import marian FOLDER_OR_HUB_ID --output_dir FOLDER`: transformers' `MarianMTModel` (Helsinki-NLP's OPUS-MT)
as an aayn folder.

A Marian model is the paper's with three differences, which the import carries as configuration, each off by
default in aayn: a bias on the output layer (`final_logits_bias`: `output_bias=True`), its activation (OPUS-MT's
base models: swish; transformer-big ones: relu) and the layout of its sinusoids. transformers' MarianMTModel lays
them out sines first, then cosines, at the paper's frequencies (`position_encoding="marian"`); marian-nmt, which
trained OPUS-MT, uses tensor2tensor's frequencies 10000^(-i/(d/2 - 1)) (aayn's "tensor2tensor"). The folder is
read by transformers, so its outputs are transformers' MarianMTModel's: the "marian" table. The weights map one to
one (queries, keys and values fused); the tokenizer is the folder's own `MarianTokenizer` (source and target
SentencePiece models, the vocabulary). What aayn's model does not have is refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import torch

from ...languages import language_tokens
from ...model.configuration_aayn import AaynConfig

# what a Marian checkpoint holds that the import computes instead: its position tables (checked against the formula)
COMPUTED = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")


class MarianImport(NamedTuple):
    """A Marian folder read and checked, ready to be written as an aayn folder."""

    source: str
    model: object  # AaynForConditionalGeneration
    tokenizer: object  # MarianTokenizer
    languages: list[str]
    provenance: dict


def marian_config(marian) -> AaynConfig:
    """The aayn config of a MarianConfig, or one line naming what aayn's model lacks."""
    from transformers.activations import ACT2FN

    if marian.model_type != "marian":
        raise ValueError(f"holds a {marian.model_type!r} model, not a Marian one (MarianMTModel)")
    if marian.activation_function not in ACT2FN:
        raise ValueError(f"activation_function={marian.activation_function!r} is not one aayn knows")
    start = marian.decoder_start_token_id
    return AaynConfig(
        vocab_size=marian.vocab_size,
        decoder_vocab_size=marian.decoder_vocab_size or marian.vocab_size,
        d_model=marian.d_model,
        encoder_layers=marian.encoder_layers,
        decoder_layers=marian.decoder_layers,
        encoder_attention_heads=marian.encoder_attention_heads,
        decoder_attention_heads=marian.decoder_attention_heads,
        encoder_ffn_dim=marian.encoder_ffn_dim,
        decoder_ffn_dim=marian.decoder_ffn_dim,
        dropout=marian.dropout,
        attention_dropout=marian.attention_dropout,
        activation_dropout=marian.activation_dropout,
        activation_function=marian.activation_function,
        init_std=marian.init_std,
        scale_embedding=marian.scale_embedding,
        share_encoder_decoder_embeddings=marian.share_encoder_decoder_embeddings,
        tie_word_embeddings=marian.tie_word_embeddings,
        max_position_embeddings=marian.max_position_embeddings,
        position_encoding="marian",
        output_bias=True,
        pad_token_id=marian.pad_token_id,
        bos_token_id=start if marian.bos_token_id is None else marian.bos_token_id,
        eos_token_id=marian.eos_token_id,
        decoder_start_token_id=start,
    )


def marian_weights(marian, config: AaynConfig) -> dict[str, torch.Tensor]:
    """The MarianMTModel's weights under aayn's names; its position tables checked against the "marian" formula."""
    from ...model.ops_aayn import sinusoidal_positions
    from .weights import mapped

    weights = marian.state_dict()
    for name in COMPUTED:
        table = weights[name]
        if not torch.allclose(table, sinusoidal_positions(0, table.shape[0], config.d_model, table.device, "marian")):
            raise ValueError(f"{name} is not MarianMTModel's sinusoid table: aayn computes its positions")
    ours = mapped(weights, marian.config, permuted=False)
    if not config.share_encoder_decoder_embeddings:
        for side in ("encoder", "decoder"):
            ours[f"model.{side}.embed.embed_tokens.weight"] = weights[f"model.{side}.embed_tokens.weight"]
    if not config.tie_word_embeddings:
        ours["lm_head.weight"] = weights["lm_head.weight"]
    ours["lm_head.bias"] = weights["final_logits_bias"].reshape(-1)
    return ours


def marian_model(source: str):
    """(transformers' MarianMTModel of `source`, aayn's model holding its weights, in eval)."""
    from transformers import AutoConfig, MarianMTModel

    from ...model.modeling_aayn import AaynForConditionalGeneration

    config = marian_config(AutoConfig.from_pretrained(source))
    marian, info = MarianMTModel.from_pretrained(source, output_loading_info=True)
    strays = sorted(set(info["unexpected_keys"]) | set(info["missing_keys"]) - set(COMPUTED) - {"final_logits_bias"})
    if strays:  # a checkpoint of another architecture read as Marian (a layer norm on the embeddings, say)
        raise ValueError(f"its weights are not MarianMTModel's: {', '.join(strays[:4])} (aayn maps none of them)")
    model = AaynForConditionalGeneration(config)
    missing, unexpected = model.load_state_dict(marian_weights(marian, config), strict=False)
    left = sorted(set(missing) - set(model.ties()))
    if unexpected or left:
        raise ValueError(f"Marian's weights do not fill aayn's model: missing {left}, unexpected {sorted(unexpected)}")
    model.tie_weights()
    return marian.eval(), model.eval()


def decoding_rules(model, marian) -> None:
    """The folder's generation config kept (`paper_decoding=False` searches as MarianMTModel.generate does), and
    stated as the paper's search's rules: its beam and alpha, hypotheses ranked by log P / |Y|^alpha (transformers'
    penalty), its stopping rule, at most max_length - 1 tokens after the start token. A value the folder leaves
    unset is transformers' default (which 5.x reads as unset and 4.57 writes out): the same rules on both lines."""
    from ...model.generation_aayn import transformers_generation_defaults

    generation = model.generation_config = marian.generation_config
    for key in ("num_beams", "length_penalty", "early_stopping", "max_length"):
        if getattr(generation, key) is None:
            setattr(generation, key, transformers_generation_defaults()[key])
    model.config.length_normalization = "fairseq"  # log P / |Y|^alpha
    model.config.search_early_stopping = generation.early_stopping  # True, False or "never", as transformers reads it
    model.config.length_limit = [0, generation.max_length - 2]


def read_marian(source: str, *, source_lang: str | None = None, target_lang: str | None = None) -> MarianImport:
    """The Marian folder (or Hub id) read and checked, nothing written."""
    from transformers import AutoTokenizer

    where = f"--model {source}" if not Path(source).is_dir() else str(source)
    try:
        marian, model = marian_model(source)
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as error:
        first = (str(error).strip() or type(error).__name__).splitlines()[0]
        raise ValueError(f"{where}: {first}") from None
    languages = [source_lang or getattr(tokenizer, "source_lang", None),
                 target_lang or getattr(tokenizer, "target_lang", None)]  # fmt: skip
    if not all(languages):
        raise ValueError(f"{where} does not name its languages: give --source_lang and --target_lang")
    decoding_rules(model, marian)
    provenance = {
        "format": "marian",
        "source": str(source),
        "activation_function": model.config.activation_function,
        "source_lang": languages[0],
        "target_lang": languages[1],
    }
    targets = language_tokens(tokenizer.get_vocab())
    if targets:  # a multi-target model: `aayn serve` serves a pair per token and puts it before each text
        provenance["target_languages"] = sorted(targets)
    model.config.imported_from = provenance
    return MarianImport(str(source), model, tokenizer, languages, provenance)


def write_provenance(staging: Path, imported: MarianImport) -> None:
    text = json.dumps(imported.provenance, indent=2) + "\n"
    (staging / "imported_from.json").write_text(text, encoding="utf-8")


def write_import_card(staging: Path, imported: MarianImport, repo_id: str) -> None:
    """The model card: where the model comes from and how it decodes (`repo_id`: the folder's name)."""
    from ...cards import write_model_card

    generation = imported.model.generation_config
    training = (
        f"A transformers `MarianMTModel` (`{imported.source}`), imported by `aayn import marian`: its weights, its "
        f"output bias, its {imported.model.config.activation_function} activation and transformers' Marian "
        f"sinusoids, with its `MarianTokenizer`. `generate()` runs the paper's search by the folder's settings "
        f"(beam {generation.num_beams}, alpha {generation.length_penalty}, log P / |Y|^alpha); "
        "`paper_decoding=False` searches as `MarianMTModel.generate` does."
    )
    targets = imported.provenance.get("target_languages")
    if targets:
        training += (f" A multi-target model: a text led by `>>xx<<` asks target xx ({', '.join(targets)}); "
                     "`aayn serve --model` serves a pair per target and puts the token itself.")  # fmt: skip
    write_model_card(
        staging, imported.model, source_lang=imported.languages[0], target_lang=imported.languages[1],
        dataset="unknown", repo_id=repo_id, example="Hello world.", training=training,
        made_with="a MarianMTModel imported by [aayn](https://pypi.org/project/aayn/)",
    )  # fmt: skip
