"""All the model code knows of the differences between the transformers lines it supports (4.57 and 5.x), in one
place. Travels with saved checkpoints as Hub remote code: it imports only transformers."""

import contextlib
import copy
import functools
import warnings

import transformers
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.utils.deprecation import deprecate_kwarg

MAJOR = int(transformers.__version__.split(".")[0])


def tied_weights_keys(tied: dict[str, str]) -> dict[str, str] | list[str]:
    """`_tied_weights_keys` from {tied: source}: 5.x declares the mapping, 4.57 the list of tied names (and ties
    the output layer through `_tie_weights`, which the model defines)."""
    return tied if MAJOR >= 5 else list(tied)


class TiedParameters:
    """Ties the parameters a model's `ties()` names ({tied: source}) on either line. 5.x ties what
    `get_expanded_tied_weights_keys` gives, here `ties()` itself: 5.x's own reading ties nothing while
    `tie_word_embeddings` is off, but §3.4's shared embeddings do not depend on the output layer's tie. 4.57 calls
    the `_tie_weights` hook (after tying the output layer to the encoder's embedding, wrong for separate
    vocabularies)."""

    def ties(self) -> dict[str, str]:
        return {}

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict[str, str]:
        return super().get_expanded_tied_weights_keys(all_submodels) if all_submodels else self.ties()

    def _tie_weights(self) -> None:
        for tied, source in self.ties().items():
            parent, _, name = tied.rpartition(".")
            module = self.get_submodule(parent)
            setattr(module, name, self.get_parameter(source))
            if hasattr(module, "out_features"):  # 4.57 set it to the encoder's vocabulary; its search reads it
                module.out_features = module.weight.shape[0]


@contextlib.contextmanager
def output_vocabulary(config):
    """While transformers' own `generate` runs: 4.57's beam search and score helpers read the output vocabulary's
    size as `config.get_text_config().vocab_size` (5.x reads the logits' width), the source vocabulary's here, so
    for separate vocabularies that call answers a copy of the config with the target's size."""
    if MAJOR >= 5 or config.decoder_vocab_size == config.vocab_size:
        yield
        return
    view = copy.copy(config)
    view.vocab_size = config.decoder_vocab_size
    config.get_text_config = lambda decoder=None, encoder=None: view
    try:
        yield
    finally:
        del config.get_text_config


# transformers 5.24 renamed the cache argument and output field from `past_key_values` to `cache`: outputs are built
# with the field the installed line declares, and the forwards take the cache under either name, as 5.24's own
# models take the old one (`deprecate_kwarg`, here without the warning: 4.57's generate passes `past_key_values`)
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"
either_cache_name = deprecate_kwarg("cache", "0", new_name="past_key_values")  # "0": already renamed, no warning

# What transformers' own callers (generate, Trainer, pipeline, PEFT) pass to a model's forward on either line that
# aayn's forwards take without a use: generate's `cache_position` (positions follow from the cache's length). Every
# other argument a forward does not name is refused, not swallowed.
PASSED_UNUSED = frozenset({"cache_position"})


def refuse_unknown(forward: str, kwargs: dict, honoured: tuple[str, ...] = ()) -> None:
    """Raise TypeError naming the arguments of `kwargs` that `forward` neither `honoured` nor may ignore."""
    unknown = sorted(set(kwargs) - PASSED_UNUSED - set(honoured))
    if unknown:
        raise TypeError(f"{forward}() got arguments it does not take: {', '.join(unknown)}")


# The stacks' attentions and hidden states are recorded by transformers from the layers (`_can_record_outputs`): 5.x
# by hooks; 4.57 by wrapping the layers' forwards for the call, warning that SDPA returns no weights (aayn's stacks
# then take the eager path), which is silenced
try:
    from transformers.utils.output_capturing import OutputRecorder, capture_outputs
except ImportError:
    from transformers.utils.generic import OutputRecorder, check_model_inputs

    def capture_outputs(forward):
        recording = check_model_inputs(forward)

        @functools.wraps(forward)  # generate() reads the encoder's signature to choose what to pass it
        def call(self, *args, **kwargs):
            if not kwargs.get("output_attentions"):
                return recording(self, *args, **kwargs)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "`output_attentions=True` is not supported")
                return recording(self, *args, **kwargs)

        return call


__all__ = [
    "CACHE_FIELD",
    "OutputRecorder",
    "TiedParameters",
    "capture_outputs",
    "either_cache_name",
    "refuse_unknown",
    "tied_weights_keys",
]


def sentencepiece_backend(model_file: str):
    """A `tokenizers.Tokenizer` that segments as the SentencePiece model in `model_file` does (unigram or BPE), by
    transformers' own converter: 5.x builds it from the model's settings (`build_tokenizer_from_spm_proto`; its
    converter instance breaks on BPE models), 4.57 converts through a `SpmConverter`."""
    from types import SimpleNamespace

    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

    if not hasattr(SpmConverter, "build_tokenizer_from_spm_proto"):
        return SpmConverter(SimpleNamespace(vocab_file=model_file, legacy=True, add_prefix_space=True)).converted()
    proto = import_protobuf().ModelProto()
    with open(model_file, "rb") as f:
        proto.ParseFromString(f.read())
    pieces = [(piece.piece, piece.score) for piece in proto.pieces]
    vocab = pieces if proto.trainer_spec.model_type == 1 else {piece: i for i, (piece, _) in enumerate(pieces)}
    return SpmConverter.build_tokenizer_from_spm_proto(proto, vocab)
