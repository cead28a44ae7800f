"""The paper's numbers that more than one place uses, each defined once: Table 3's base shape, and §6.1's decoding
policy ("We used beam search with a beam size of 4 and length penalty alpha = 0.6 [GNMT] ... set the maximum output
length during inference to input length + 50").

Imported by the configuration and the search (so it travels with every saved checkpoint), the training arguments,
the CTranslate2 and ONNX translators and exports, scoring, the server and the benchmark; it imports nothing, so that
a CTranslate2 translation (or `aayn train --help`) does not wait for torch.
"""

import math

# Table 3's base model: a new model's shape (AaynConfig's defaults, `aayn train`'s recipe keys); §5.1: a shared
# vocabulary of "about 37000 tokens" (byte-pair encoding, EN-DE)
BASE_VOCAB_SIZE = 37000
BASE_D_MODEL = 512
BASE_LAYERS = 6
BASE_HEADS = 8
BASE_FFN_DIM = 2048

# §5.4: "we use a rate of P_drop = 0.1" (residual and embedding dropout); the positions a new model's table covers
BASE_DROPOUT = 0.1
MAX_POSITIONS = 1024

# a new vocabulary's kind (byte-level BPE; `tokenizer_type: sentencepiece` the other) and a card's licence
TOKENIZER_TYPE = "bpe"
LICENSE = "apache-2.0"

# §6.1: "beam search with a beam size of 4 and length penalty alpha = 0.6": a new model's generation config
PAPER_NUM_BEAMS = 4
PAPER_LENGTH_PENALTY = 0.6

# alpha where a generation config leaves it unset: transformers' GenerationConfig default, which
# `generation_config.json` leaves out (as it leaves out its 1 beam)
UNSET_LENGTH_PENALTY = 1.0

# §6.1: "set the maximum output length during inference to input length + 50"
EXTRA_TARGET_TOKENS = 50


def paper_length_limit(source_length):
    """The most target tokens (eos counted) for a source of `source_length` tokens: an int or a tensor of them."""
    return source_length + EXTRA_TARGET_TOKENS


def sentence_length_limit(source_length, rule=None):
    """The most target tokens (eos counted) for a source of `source_length` tokens under a folder's `length_limit`
    rule ([a, b]: fairseq's --max-len-a / --max-len-b, at most a * source + b tokens before eos; None: §6.1's
    source + 50). An int, or a tensor or array of them (the integer part of a * source, as fairseq's int())."""
    if rule is None:
        return paper_length_limit(source_length)
    scaled = float(rule[0]) * source_length
    if hasattr(scaled, "long"):  # a tensor
        scaled = scaled.long()
    elif hasattr(scaled, "astype"):  # a numpy array or number
        scaled = scaled.astype("int64")
    else:
        scaled = int(scaled)
    return scaled + int(rule[1]) + 1


# the decoding rules a folder states in its model config (config.json), which every engine reads as its search:
# GNMT's or fairseq's lp, a length limit other than §6.1's ([a, b]), and the stopping rule ("never": the exact rule;
# True: once k hypotheses finished, fairseq's and CTranslate2's; False: transformers' heuristic)
FOLDER_RULES = ("length_normalization", "length_limit", "search_early_stopping")
STOPPING_RULES = ("never", True, False)


def folder_rules(config: dict) -> dict:
    """The decoding rules `config` (a model config as a dict) states, those it leaves unset left out."""
    return {key: config[key] for key in FOLDER_RULES if config.get(key) is not None}


def source_limit(tokenizer_limit: int | None, max_position_embeddings: int) -> int:
    """The most source tokens a translation reads (longer sources are cut, with a warning): the tokenizer's
    model_max_length (None: no limit of its own) within the model's position table."""
    return min(tokenizer_limit or max_position_embeddings, max_position_embeddings)


def gnmt_length_penalty(length, alpha: float):
    """lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016), |Y| counting eos: an int or a tensor of lengths. A
    hypothesis scores log P / lp(Y). transformers' own penalty is |Y|^alpha."""
    return ((5 + length) / 6) ** alpha


LENGTH_NORMALIZATIONS = ("gnmt", "fairseq")  # a generation config's `length_normalization`; "gnmt": §6.1's


def length_penalty(length, alpha: float, normalization: str = "gnmt"):
    """lp(Y) a hypothesis's log P is divided by: GNMT's ((5 + |Y|) / 6)^alpha (the paper's), or with
    `normalization="fairseq"` |Y|^alpha (fairseq's `--lenpen`), |Y| counting eos."""
    if normalization == "fairseq":
        return length**alpha
    return gnmt_length_penalty(length, alpha)


def largest_length_penalty(limits, step: int, alpha: float, normalization: str, min_step: int = 1):
    """(n,) the largest lp a sentence's live hypotheses can still reach after `step`, for torch tensors and numpy
    arrays alike: at the sentence's limit where lp grows with the length (alpha >= 0), else at the shortest length
    still possible (the next step, or `min_step`, the first at which eos may end a hypothesis)."""
    if alpha >= 0:
        return length_penalty(limits, alpha, normalization)
    return length_penalty(limits.clip(max=max(step + 1, min_step)), alpha, normalization)


def search_done(finished, best_live, step: int, alpha: float, normalization: str, early_stopping, returned: int,
                largest_lp):  # fmt: skip
    """(n,) whether each sentence's beam search may stop, by its early-stopping rule; `finished` (n, k) the best k
    finished scores (log P / lp, -inf where fewer), `best_live` (n,) the best live log P, `largest_lp` from
    `largest_length_penalty`. Written once, with operators only, for the torch search (`search_aayn`) and the ONNX
    engine's numpy one."""
    k = finished.shape[1]
    if early_stopping is True:  # transformers: as soon as k hypotheses finished
        return finished[:, k - 1] > -math.inf
    if early_stopping is False:  # transformers' heuristic: the best live beam, were it to end next
        return finished[:, k - 1] >= best_live / length_penalty(step + 1, alpha, normalization)
    # exact ("never"): log P only falls, so a live beam reaches at most log P / the largest lp still possible
    return finished[:, returned - 1] >= best_live / largest_lp


def length_penalty_in_force(given, saved) -> float:
    """alpha: as given, else the saved generation config's, else transformers' default."""
    alpha = given if given is not None else saved
    return UNSET_LENGTH_PENALTY if alpha is None else alpha


def beams_for(num_beams, nbest: int = 1) -> int:
    """The beam size a search runs with: `num_beams` (None or 0: the greedy 1), at least the `nbest` it returns."""
    return max(num_beams or 1, nbest)


def returned_fault(returned: int, beams: int | None) -> str | None:
    """Why a search cannot return `returned` hypotheses with `beams` beams, or None (a beam search returns at most
    its beams)."""
    if beams is not None and returned > beams:
        return f"num_return_sequences={returned} exceeds num_beams={beams} (a beam search returns at most its beams)"
    return None


def alignment_in_force(layers: int, heads: int, layer=None, count=None) -> tuple[int, int]:
    """fairseq's `alignment_layer` / `alignment_heads` for a decoder of `layers` layers of `heads` heads: (the layer,
    from 0, default the last; how many of its first heads are averaged, default all), or ValueError naming a bad one."""
    chosen = layers - 1 if layer is None else layer
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < layers:
        raise ValueError(f"alignment_layer must be a decoder layer from 0 to {layers - 1}, got {layer!r}")
    averaged = heads if count is None else count
    if isinstance(averaged, bool) or not isinstance(averaged, int) or not 1 <= averaged <= heads:
        raise ValueError(f"alignment_heads must be from 1 to the layer's {heads} heads, got {count!r}")
    return chosen, averaged
