"""`aayn import fairseq CHECKPOINT.pt --output_dir FOLDER`: a fairseq Transformer as an aayn folder.

fairseq's `transformer` family is the paper's model; where fairseq's choices differ from aayn's defaults, the
import carries them as configuration: its sinusoids (`position_encoding="tensor2tensor"`, positions counted from
its padding id + 1, `position_offset`), its dictionary order (`<s> <pad> </s> <unk>` first: ids 0 to 3) and its
decoder start token (`</s>`). The checkpoint is read without fairseq: the classes it pickled besides tensors and
settings (its meters, its dataclasses) are read as stand-ins and never used. The folder carries a tokenizer
that gives the ids fairseq's pipeline fed the model: for `--bpe sentencepiece` a tokenizer.json built with the
`tokenizers` pieces transformers' own SentencePiece converter uses; for `--tokenizer moses --bpe subword_nmt`
transformers' FSMT tokenizer as fairseq's pipeline runs it (`tokenization_fairseq_aayn`, each side its dictionary).
What aayn's model does not have is refused in one line naming the setting, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
from pathlib import Path
from typing import NamedTuple

import torch
from transformers.utils import logging

from ...model.configuration_aayn import AaynConfig

logger = logging.get_logger(__name__)

# fairseq's registered architectures that are the `transformer` model with other sizes (base_architecture)
ARCHITECTURES = (
    "transformer", "transformer_tiny", "transformer_iwslt_de_en", "transformer_wmt_en_de",
    "transformer_vaswani_wmt_en_de_big", "transformer_vaswani_wmt_en_fr_big", "transformer_wmt_en_de_big",
    "transformer_wmt_en_de_big_t2t",
)  # fmt: skip
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_accurate": "gelu_new", "tanh": "tanh", "linear": "linear"}
# settings of fairseq's Transformer that aayn's model does not have: (name, the value that means "off")
REFUSED = (
    ("encoder_learned_pos", False), ("decoder_learned_pos", False), ("layernorm_embedding", False),
    ("no_token_positional_embeddings", False), ("adaptive_input", False), ("adaptive_softmax_cutoff", None),
    ("tie_adaptive_weights", False), ("quant_noise_pq", 0), ("encoder_layerdrop", 0), ("decoder_layerdrop", 0),
    ("cross_self_attention", False), ("no_cross_attention", False), ("alignment_heads", None),
    ("alignment_layer", None),
)  # fmt: skip
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary: ids 0 to 3


class _StandIn:
    """An object of a class the checkpoint names and this process lacks (fairseq's meters, say): kept, never used."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.__dict__["state"] = state


class _Unpickler(pickle.Unpickler):
    stand_ins: dict = {}

    def find_class(self, module: str, name: str):
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return self.stand_ins.setdefault((module, name), type(name, (_StandIn,), {"__module__": module}))


class _PickleModule:
    """What `torch.load` needs of a pickle module, with fairseq's classes read as stand-ins."""

    Unpickler = _Unpickler
    __name__ = "aayn_fairseq_pickle"

    @staticmethod
    def load(file, **kwargs):
        return _Unpickler(file, **kwargs).load()


def read_checkpoint(path: str | Path) -> tuple[dict, dict, str]:
    """fairseq 0.9 to 0.12's checkpoint: (its model settings as a flat dict, its state dict, where they were)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"the fairseq checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_PickleModule)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as error:  # truncated, foreign
        raise ValueError(f"{path} is not a readable fairseq checkpoint ({type(error).__name__}: {error})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise ValueError(f"{path} is not a fairseq checkpoint: it holds no 'model' state dict")
    if state.get("args") is not None:
        settings, source = vars(state["args"]), "args"
    elif isinstance(state.get("cfg"), dict) and state["cfg"].get("model") is not None:
        model = state["cfg"]["model"]
        settings, source = (vars(model) if isinstance(model, argparse.Namespace) else dict(model)), "cfg.model"
    else:
        raise ValueError(f"{path} holds neither 'args' nor 'cfg.model': not a fairseq checkpoint of 0.9 to 0.12")
    settings = dict(settings)
    for side in ("encoder", "decoder"):  # fairseq 0.12's dataclass settings nest each stack's (encoder.embed_dim)
        if isinstance(settings.get(side), dict):
            for name, value in settings[side].items():
                settings.setdefault(f"{side}_{name}", value)
    if isinstance(state.get("cfg"), dict) and isinstance(state["cfg"].get("criterion"), dict):
        settings.setdefault("label_smoothing", state["cfg"]["criterion"].get("label_smoothing", 0.0))
    return settings, state["model"], source


def fairseq_config(settings: dict, weights: dict[str, torch.Tensor]) -> AaynConfig:
    """aayn's configuration of the fairseq Transformer described by `settings`, or a ValueError naming the first
    setting aayn's model does not have."""
    arch = settings.get("arch") or settings.get("_name")
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch={arch!r} is not fairseq's Transformer; aayn imports {', '.join(ARCHITECTURES)}")
    for name, off in REFUSED:
        value = settings.get(name, off)
        if value not in (off, None, False, 0, "", "0"):
            raise ValueError(f"{name}={value!r}: aayn's model has no such part (the paper's Transformer does not)")
    activation = settings.get("activation_fn", "relu")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation_fn={activation!r} is not one aayn has; allowed: {', '.join(ACTIVATIONS)}")
    pre_norm = bool(settings.get("encoder_normalize_before", False))
    if bool(settings.get("decoder_normalize_before", False)) != pre_norm:
        raise ValueError(
            f"encoder_normalize_before={pre_norm} and decoder_normalize_before="
            f"{settings.get('decoder_normalize_before')}: aayn's stacks are both post-norm or both pre-norm"
        )
    if pre_norm and settings.get("no_decoder_final_norm", False):
        raise ValueError(
            "no_decoder_final_norm=True: aayn's pre-norm decoder ends with its layer norm, as fairseq's does by default"
        )
    if pre_norm:  # fairseq's upgrade_state_dict_named: before these versions a stack had no final layer norm
        for side, first in (("encoder", 2), ("decoder", 3)):
            version = float(weights.get(f"{side}.version", torch.tensor([1.0])).flatten()[0])
            if version < first:
                raise ValueError(
                    f"{side}.version={version:g}: a checkpoint from before fairseq gave pre-norm stacks a final layer "
                    f"norm, so fairseq runs its {side} without one; aayn's pre-norm stacks end with it"
                )
    for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "encoder.layers.0.fc1.weight",
                 "decoder.layers.0.fc1.weight"):  # fmt: skip
        if name not in weights:
            raise ValueError(f"the checkpoint has no {name}: not the weights of fairseq's Transformer")
    d_model = weights["encoder.embed_tokens.weight"].shape[1]
    for name in ("decoder_embed_dim", "decoder_output_dim", "decoder_input_dim"):
        if settings.get(name, d_model) != d_model:
            raise ValueError(f"{name}={settings[name]} differs from encoder_embed_dim={d_model}: aayn has one width")
    shared = bool(settings.get("share_all_embeddings", False))
    layers = {side: len({key.split(".")[2] for key in weights if key.startswith(f"{side}.layers.")})
              for side in ("encoder", "decoder")}  # fmt: skip
    vocab, decoder_vocab = (weights[f"{side}.embed_tokens.weight"].shape[0] for side in ("encoder", "decoder"))
    return AaynConfig(
        vocab_size=vocab,
        decoder_vocab_size=decoder_vocab,
        d_model=d_model,
        encoder_layers=layers["encoder"],
        decoder_layers=layers["decoder"],
        encoder_attention_heads=settings.get("encoder_attention_heads", 8),  # fairseq's base_architecture's
        decoder_attention_heads=settings.get("decoder_attention_heads", 8),
        encoder_ffn_dim=weights["encoder.layers.0.fc1.weight"].shape[0],
        decoder_ffn_dim=weights["decoder.layers.0.fc1.weight"].shape[0],
        dropout=settings.get("dropout", 0.1),
        attention_dropout=settings.get("attention_dropout", 0.0),
        activation_dropout=settings.get("activation_dropout", settings.get("relu_dropout", 0.0)),
        activation_function=ACTIVATIONS[activation],
        norm_first=pre_norm,
        label_smoothing=settings.get("label_smoothing", 0.0),
        scale_embedding=not settings.get("no_scale_embedding", False),
        share_encoder_decoder_embeddings=shared,
        tie_word_embeddings=shared or bool(settings.get("share_decoder_input_output_embed", False)),
        max_position_embeddings=max(
            settings.get("max_source_positions", 1024), settings.get("max_target_positions", 1024)
        ),
        position_encoding="tensor2tensor",
        position_offset=SPECIALS.index("<pad>") + 1,
        bos_token_id=SPECIALS.index("<s>"),
        pad_token_id=SPECIALS.index("<pad>"),
        eos_token_id=SPECIALS.index("</s>"),
        decoder_start_token_id=SPECIALS.index("</s>"),
    )


def fairseq_weights(config: AaynConfig, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """aayn's state dict from fairseq's: q, k and v projections fused, layer norms renamed, each tied matrix once.
    A fairseq key that would be left unused is refused, naming it."""
    ours, used = {}, set()

    def take(name: str) -> torch.Tensor:
        if name not in weights:
            raise ValueError(f"the checkpoint has no {name}: not the weights of fairseq's Transformer")
        used.add(name)
        return weights[name].float()

    def linear(target: str, *sources: str) -> None:
        for kind in ("weight", "bias"):
            ours[f"{target}.{kind}"] = torch.cat([take(f"{source}.{kind}") for source in sources])

    for side, stack in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(stack):
            ours_prefix, theirs = f"model.{side}.layers.{i}", f"{side}.layers.{i}"
            attention = f"{theirs}.self_attn"
            linear(f"{ours_prefix}.self_attn.qkv_proj", *(f"{attention}.{p}_proj" for p in "qkv"))
            linear(f"{ours_prefix}.self_attn.out_proj", f"{attention}.out_proj")
            norms = {"self_attn_norm": "self_attn_layer_norm", "feed_forward_norm": "final_layer_norm"}
            if side == "decoder":
                cross = f"{theirs}.encoder_attn"
                linear(f"{ours_prefix}.encoder_attn.q_proj", f"{cross}.q_proj")
                linear(f"{ours_prefix}.encoder_attn.kv_proj", f"{cross}.k_proj", f"{cross}.v_proj")
                linear(f"{ours_prefix}.encoder_attn.out_proj", f"{cross}.out_proj")
                norms["encoder_attn_norm"] = "encoder_attn_layer_norm"
            for fc in ("fc1", "fc2"):
                linear(f"{ours_prefix}.feed_forward.{fc}", f"{theirs}.{fc}")
            for mine, their_norm in norms.items():
                linear(f"{ours_prefix}.{mine}", f"{theirs}.{their_norm}")
        if config.norm_first:
            linear(f"model.{side}.layer_norm", f"{side}.layer_norm")
    if config.share_encoder_decoder_embeddings:
        ours["model.shared.weight"] = take("encoder.embed_tokens.weight")
        used.add("decoder.embed_tokens.weight")  # the same matrix
    else:
        for side in ("encoder", "decoder"):
            ours[f"model.{side}.embed.embed_tokens.weight"] = take(f"{side}.embed_tokens.weight")
    output = (
        "decoder.output_projection.weight" if "decoder.output_projection.weight" in weights else "decoder.embed_out"
    )
    if config.tie_word_embeddings:
        used.add(output)
    else:
        ours["lm_head.weight"] = take(output)
    # the sinusoids' cache and version counters: computed by aayn, not weights
    unused = [key for key in weights if key not in used and not key.endswith(("_float_tensor", ".version"))]
    unused = [key for key in unused if not key.endswith("embed_positions.weights")]
    if unused:
        raise ValueError(f"the checkpoint's {unused[0]} has no place in aayn's model ({len(unused)} such keys)")
    return ours


def fairseq_model(checkpoint: str | Path):
    """(the checkpoint's model as an `AaynForConditionalGeneration` in eval, fairseq's settings, where they were)."""
    from ...model.modeling_aayn import AaynForConditionalGeneration

    settings, weights, source = read_checkpoint(checkpoint)
    config = fairseq_config(settings, weights)
    model = AaynForConditionalGeneration(config)
    missing, unexpected = model.load_state_dict(fairseq_weights(config, weights), strict=False)
    if unexpected or set(missing) - set(model.ties()):
        raise ValueError(
            f"fairseq's weights do not fill aayn's model: missing {sorted(set(missing) - set(model.ties()))}"
        )
    model.tie_weights()
    return model.eval(), settings, source


def read_dictionary(path: Path) -> list[str]:
    """A fairseq dict.txt (`SYMBOL COUNT [#fairseq:overwrite]` per line) as its ids' symbols, specials first."""
    symbols = list(SPECIALS)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.rstrip().split(" ")
        if len(fields) < 2:
            raise ValueError(f"{path}:{number} is not `SYMBOL COUNT`: {line!r}")
        symbols.append(fields[0])
    return symbols


def lacked_pieces(model_path: Path, symbols: list[str]) -> list[str]:
    """The pieces of a SentencePiece model (its normal ones) that fairseq's dictionary `symbols` lacks."""
    from transformers.convert_slow_tokenizer import import_protobuf

    proto = import_protobuf().ModelProto()
    proto.ParseFromString(model_path.read_bytes())
    known = set(symbols)
    return [piece.piece for piece in proto.pieces if piece.type == 1 and piece.piece not in known]


def fairseq_numbered_sentencepiece(model_path: Path, symbols: list[str]):
    """A `tokenizers` tokenizer that segments as the SentencePiece model does and numbers pieces as fairseq's
    dictionary (`symbols`), ending each text with `</s>`: the ids fairseq's `--bpe sentencepiece` pipeline gives.
    Built as transformers' SentencePiece converter builds a unigram model's, from the model's own normalizer spec,
    for a dictionary that holds every piece (else `FairseqSentencePieceTokenizer` reads the lacked ones as <unk>)."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram
    from transformers.convert_slow_tokenizer import import_protobuf

    proto = import_protobuf().ModelProto()
    proto.ParseFromString(model_path.read_bytes())
    if proto.trainer_spec.model_type != 1:  # 1: unigram; 2: bpe, 3: word, 4: char
        raise ValueError(
            f"{model_path} is a SentencePiece model of type {proto.trainer_spec.model_type} (1 is unigram): only "
            "unigram models (SentencePiece's default) are imported"
        )
    scores = {piece.piece: piece.score for piece in proto.pieces if piece.type == 1}  # 1: normal pieces
    lowest = min(scores.values(), default=0.0) - 10.0
    vocab = [(symbol, scores.get(symbol, lowest)) for symbol in symbols]
    tokenizer = Tokenizer(Unigram(vocab, unk_id=symbols.index("<unk>"), byte_fallback=False))
    spec = proto.normalizer_spec
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    prepend = "always" if spec.add_dummy_prefix else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend, split=True)
    # fairseq's decoding: pieces joined, "▁" as spaces, the text stripped at both ends (a regular expression: a Strip
    # of one character each side panics on an empty translation)
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.Fuse(), decoders.Replace(Regex(r"\A\s+|\s+\z"), "")]
    )
    eos = symbols.index("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", eos)])
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer


SENTENCEPIECE_NAMES = ("sentencepiece.bpe.model", "spm.model", "sentencepiece.model")
BPE_CODES_NAMES = ("bpecodes", "bpe.codes", "codes", "code")  # fairseq's published WMT models: bpecodes


def moses_bpe_tokenizer(codes_path: Path, symbols: dict[str, list[str]], settings: dict, langs: list[str], work: Path):
    """fairseq's `--tokenizer moses --bpe subword_nmt` pipeline as `FairseqMosesBPETokenizer`, its files (the
    dictionaries in FSMT's layout, the codes as merges) written into `work`: the ids fairseq's pipeline gives."""
    from ...model.tokenization_fairseq_aayn import FairseqMosesBPETokenizer

    lines = codes_path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("#version: 0.2"):
        raise ValueError(
            f"{codes_path} is not subword-nmt codes of version 0.2 (its first line: {lines[0] if lines else ''!r}); "
            "aayn imports subword-nmt 0.2 codes (learn_bpe.py's since 2017)"
        )
    merges = {}  # subword-nmt applies a pair's first rank
    for number, line in enumerate(lines[1:], 2):
        pair = tuple(line.split(" ")[:2])
        if len(pair) != 2:
            raise ValueError(f"{codes_path}:{number} is not a BPE merge `LEFT RIGHT`: {line!r}")
        merges.setdefault(pair, len(merges))
    (work / "merges.txt").write_text("".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    for side, name in (("source", "vocab-src.json"), ("target", "vocab-tgt.json")):
        vocab = {}  # fairseq's "piece@@" continues a word: FSMT's "piece"; its "piece" ends one: "piece</w>"
        for index, symbol in enumerate(symbols[side]):
            token = symbol if index < len(SPECIALS) else symbol[:-2] if symbol.endswith("@@") else f"{symbol}</w>"
            vocab.setdefault(token, index)
        (work / name).write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return FairseqMosesBPETokenizer(
        langs=langs, src_vocab_file=str(work / "vocab-src.json"), tgt_vocab_file=str(work / "vocab-tgt.json"),
        merges_file=str(work / "merges.txt"), eos_token="</s>", moses_escape=not settings.get("moses_no_escape", False),
        moses_dash_splits=not settings.get("moses_no_dash_splits", False),
    )  # fmt: skip


def subword_model(settings: dict, folder: Path, sentencepiece_model, bpe_codes) -> tuple[str, Path]:
    """Which of fairseq's pipelines the checkpoint was trained in (`sentencepiece`, or `subword_nmt` after
    Moses) and its model's file: named by a flag, else found beside the checkpoint (a checkpoint trained on
    prepared data records no `bpe`), or a ValueError naming what is missing or not handled."""
    bpe, tokenizer = settings.get("bpe"), settings.get("tokenizer")
    if bpe not in (None, "sentencepiece", "subword_nmt"):
        raise ValueError(f"bpe={bpe!r}: aayn imports fairseq's sentencepiece and subword_nmt (after Moses) pipelines")
    if tokenizer not in (None, "moses") and bpe != "sentencepiece":
        raise ValueError(f"tokenizer={tokenizer!r}: aayn imports subword_nmt BPE after Moses tokenization only")
    found = {
        "sentencepiece": [Path(sentencepiece_model)] if sentencepiece_model else
        [folder / name for name in SENTENCEPIECE_NAMES if (folder / name).is_file()],
        "subword_nmt": [Path(bpe_codes)] if bpe_codes else
        [folder / name for name in BPE_CODES_NAMES if (folder / name).is_file()],
    }  # fmt: skip
    kinds = [bpe] if bpe else [kind for kind in found if found[kind]]
    if len(kinds) != 1 or not found[kinds[0]]:
        raise ValueError(
            f"the checkpoint's subword model was not found (bpe={bpe!r}): give --sentencepiece_model (fairseq's "
            "--bpe sentencepiece) or --bpe_codes (subword-nmt codes after Moses)"
            + (", not both" if len(kinds) > 1 else "")
        )
    path = found[kinds[0]][0]
    if not path.is_file():
        raise FileNotFoundError(f"the subword model {path} does not exist")
    return kinds[0], path


class FairseqImport(NamedTuple):
    """A fairseq checkpoint read and checked, ready to be written as an aayn folder (`write_import`)."""

    checkpoint: Path
    model: object  # AaynForConditionalGeneration
    settings: dict
    languages: list[str]
    symbols: dict[str, list[str]]
    subword: tuple[str, Path]  # ("sentencepiece" or "subword_nmt", the model or codes file)
    provenance: dict


def read_fairseq(
    checkpoint: Path,
    *,
    source_dictionary: str | Path | None = None,
    target_dictionary: str | Path | None = None,
    sentencepiece_model: str | Path | None = None,
    bpe_codes: str | Path | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
) -> FairseqImport:
    """The checkpoint, its dictionaries and its subword model read and checked (nothing written). Dictionaries and
    the subword model are found beside the checkpoint unless named."""
    model, settings, source = fairseq_model(checkpoint)
    languages = [source_lang or settings.get("source_lang"), target_lang or settings.get("target_lang")]
    folder = checkpoint.parent
    if not all(languages):
        found = sorted(path.name for path in folder.glob("dict.*.txt"))
        raise ValueError(
            f"{checkpoint} does not name its languages (fairseq read them from its data folder): give --source_lang "
            f"and --target_lang (beside it: {', '.join(found) or 'no dict.*.txt'})"
        )
    dictionaries = {
        "source": Path(source_dictionary or folder / f"dict.{languages[0]}.txt"),
        "target": Path(target_dictionary or folder / f"dict.{languages[1]}.txt"),
    }
    symbols = checked_dictionaries(dictionaries, model.config)
    kind, subword_path = subword_model(settings, folder, sentencepiece_model, bpe_codes)
    if kind == "sentencepiece" and symbols["source"] != symbols["target"]:
        raise ValueError(
            "separate source and target dictionaries with --bpe sentencepiece: aayn imports SentencePiece "
            "pipelines with one joined dictionary (fairseq-preprocess --joined-dictionary)"
        )
    # fairseq-interactive's default search: beam 5, hypotheses ranked by log P / |Y|^1 (--lenpen 1), k finished
    model.generation_config.num_beams = 5
    model.generation_config.length_penalty = 1.0
    model.generation_config.min_new_tokens = 1  # fairseq's --min-len 1: eos is never the first token
    model.config.length_normalization = "fairseq"  # the model config keeps it (a generation config drops it)
    model.config.length_limit = [0, 200]  # fairseq's --max-len-a 0 --max-len-b 200: 200 tokens before eos
    model.config.search_early_stopping = True  # fairseq ends a sentence once k hypotheses have finished
    provenance = {
        "format": "fairseq",
        "fairseq_version": "0.10 to 0.12 (settings in cfg)" if source == "cfg.model" else "0.9 or earlier (args)",
        "arch": settings.get("arch") or settings.get("_name"),
        "settings_from": source,
        "checkpoint": checkpoint.name,
        "dictionaries": [path.name for path in dictionaries.values()],
        "bpe": kind,
        "tokenizer": "moses" if kind == "subword_nmt" else None,
        "source_lang": languages[0],
        "target_lang": languages[1],
    }
    model.config.imported_from = provenance
    return FairseqImport(checkpoint, model, settings, languages, symbols, (kind, subword_path), provenance)


def write_import(staging: Path, imported: FairseqImport):
    """The tokenizer's own files (built from the dictionaries and the subword model) and `imported_from.json` into
    `staging`; the tokenizer, for the aayn folder's files (`aayn.formats.fairseq`)."""
    kind, subword_path = imported.subword
    tokenizer = imported_tokenizer(kind, subword_path, imported.symbols, imported.settings, imported.languages, staging)
    tokenizer.model_max_length = imported.model.config.max_position_embeddings
    text = json.dumps(imported.provenance, indent=2) + "\n"
    (staging / "imported_from.json").write_text(text, encoding="utf-8")
    return tokenizer


def write_import_card(staging: Path, imported: FairseqImport, repo_id: str) -> None:
    """The model card: where the model comes from and how it decodes (`repo_id`: the folder's name)."""
    from ...cards import write_model_card

    provenance, languages = imported.provenance, imported.languages
    training = (
        f"Trained with fairseq ({provenance['fairseq_version']}, architecture `{provenance['arch']}`), imported "
        f"by `aayn import fairseq` from `{imported.checkpoint.name}` with the dictionaries "
        f"{', '.join(f'`{name}`' for name in provenance['dictionaries'])} and {pipeline_phrase(imported)}. "
        "`generate()` decodes "
        "as `fairseq-interactive` does by default: beam 5, hypotheses ranked by log P / |Y|, fairseq's stopping "
        "rule, at most 200 tokens."
    )
    write_model_card(
        staging, imported.model, source_lang=languages[0], target_lang=languages[1], dataset="unknown",
        repo_id=repo_id, example="Hello world.", training=training,
        made_with="trained with fairseq and imported by [aayn](https://pypi.org/project/aayn/)",
    )  # fmt: skip


def checked_dictionaries(dictionaries: dict[str, Path], config) -> dict[str, list[str]]:
    """Each side's symbols, read from its fairseq dictionary, or one line saying which file is missing or is not
    this checkpoint's (its size differs from the embedding's)."""
    for side, path in dictionaries.items():
        if not path.is_file():
            raise FileNotFoundError(f"the {side} dictionary {path} does not exist (--{side}_dictionary names it)")
    symbols = {side: read_dictionary(path) for side, path in dictionaries.items()}
    for side, size in (("source", config.vocab_size), ("target", config.decoder_vocab_size)):
        if len(symbols[side]) != size:
            raise ValueError(
                f"the {side} dictionary {dictionaries[side]} has {len(symbols[side])} symbols with fairseq's four "
                f"specials, the checkpoint's embedding {size}: not this checkpoint's dictionary"
            )
    return symbols


def imported_tokenizer(kind: str, subword_path: Path, symbols: dict, settings: dict, languages: list, staging: Path):
    """The tokenizer of the checkpoint's subword pipeline; the subword model's own files are written into
    `staging`."""
    if kind == "sentencepiece" and lacked_pieces(subword_path, symbols["source"]):
        from ...model.tokenization_fairseq_aayn import FairseqSentencePieceTokenizer

        shutil.copyfile(subword_path, staging / "sentencepiece.model")
        encoder = {}
        for index, symbol in enumerate(symbols["source"]):
            encoder.setdefault(symbol, index)
        (staging / "vocab.json").write_text(json.dumps(encoder, ensure_ascii=False) + "\n", encoding="utf-8")
        return FairseqSentencePieceTokenizer(str(staging / "sentencepiece.model"), str(staging / "vocab.json"))
    if kind == "sentencepiece":
        from transformers import PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=fairseq_numbered_sentencepiece(subword_path, symbols["source"]),
            bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
            model_input_names=["input_ids", "attention_mask"],
        )  # fmt: skip
        tokenizer.sentencepiece_model = subword_path.read_bytes()  # saved beside it as sentencepiece.model
        return tokenizer
    return moses_bpe_tokenizer(subword_path, symbols, settings, languages, staging)


def pipeline_phrase(imported: FairseqImport) -> str:
    """The checkpoint's subword pipeline, in words, for the card."""
    kind, subword_path = imported.subword
    if kind == "sentencepiece" and lacked_pieces(subword_path, imported.symbols["source"]):
        return (
            f"the SentencePiece model `{subword_path.name}` (kept as `sentencepiece.model`; pieces the dictionary "
            "lacks read as `<unk>`, as in fairseq)"
        )
    if kind == "sentencepiece":
        return f"the SentencePiece model `{subword_path.name}` (kept as `sentencepiece.model`)"
    return f"Moses tokenization and the subword-nmt codes `{subword_path.name}` (kept as `merges.txt`)"
