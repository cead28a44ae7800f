"""All the model code knows of the differences between the transformers lines it supports (4.57 and 5.x), in one
place. Travels with saved checkpoints as Hub remote code: it imports only transformers."""

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


# transformers 5.24 renamed the cache argument and output field from `past_key_values` to `cache`: outputs are built
# with the field the installed line declares, and the forwards take the cache under either name, as 5.24's own
# models take the old one (`deprecate_kwarg`, here without the warning: 4.57's generate passes `past_key_values`)
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"
either_cache_name = deprecate_kwarg("cache", "0", new_name="past_key_values")  # "0": already renamed, no warning

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


__all__ = ["CACHE_FIELD", "OutputRecorder", "capture_outputs", "either_cache_name", "tied_weights_keys"]
