"""§6.1's decoding policy, each rule defined once: "We used beam search with a beam size of 4 and length penalty
alpha = 0.6 [GNMT] ... set the maximum output length during inference to input length + 50".

Imported by the search (so it travels with every saved checkpoint), the CTranslate2 translator and export, scoring
and the benchmark; it imports nothing, so that a CTranslate2 translation does not wait for torch.
"""

# §6.1: "set the maximum output length during inference to input length + 50"
EXTRA_TARGET_TOKENS = 50


def paper_length_limit(source_length):
    """The most target tokens (eos counted) for a source of `source_length` tokens: an int or a tensor of them."""
    return source_length + EXTRA_TARGET_TOKENS


def gnmt_length_penalty(length, alpha: float):
    """lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016), |Y| counting eos: an int or a tensor of lengths. A
    hypothesis scores log P / lp(Y). transformers' own penalty is |Y|^alpha."""
    return ((5 + length) / 6) ** alpha
