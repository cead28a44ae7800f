"""`aayn bench`: AAYN against transformers' MarianMTModel, side by side in one run. The base shape's training and
generation rows are in `base_shape.py`, the decoding rows (a trained model, real sentences) in `decoding.py`, what
they share in `common.py`."""

from .base_shape import (
    attention_agreement,
    ctranslate2_translators,
    equal_models,
    forward_flops,
    padded_batch,
    print_table,
    run_bench,
    sentence_lengths,
    token_batch,
    write_json,
)
from .demo import DEMO_SHAPE

__all__ = [
    "DEMO_SHAPE",
    "attention_agreement",
    "ctranslate2_translators",
    "equal_models",
    "forward_flops",
    "padded_batch",
    "print_table",
    "run_bench",
    "sentence_lengths",
    "token_batch",
    "write_json",
]
