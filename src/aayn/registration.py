"""How `import aayn` registers model type "aayn" with transformers' Auto classes without importing transformers itself
(see the package's docstring): `register`, and the `sys.meta_path` finder that runs it once transformers is
imported. Importing this module installs the finder (or registers at once where transformers is already imported).
"""

import functools
import importlib.abc
import sys
from pathlib import Path


def register() -> None:
    """Register model type "aayn" with transformers' Auto classes (safe to call again)."""
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

    from .model.configuration_aayn import AaynConfig
    from .model.modeling_aayn import AaynForConditionalGeneration, AaynModel
    from .model.tokenization_fairseq_aayn import FairseqMosesBPETokenizer, FairseqSentencePieceTokenizer

    AutoConfig.register(AaynConfig.model_type, AaynConfig, exist_ok=True)
    # an imported fairseq folder's tokenizers, known by name (its folder's copy needs no trust here): transformers
    # finds a registered tokenizer class by name among those registered for any config class, one slow class each
    AutoTokenizer.register(AaynConfig, slow_tokenizer_class=FairseqMosesBPETokenizer, exist_ok=True)
    AutoTokenizer.register(_sentencepiece_key(), slow_tokenizer_class=FairseqSentencePieceTokenizer, exist_ok=True)
    AutoModel.register(AaynConfig, AaynModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(AaynConfig, AaynForConditionalGeneration, exist_ok=True)
    AaynConfig.register_for_auto_class()
    AaynModel.register_for_auto_class("AutoModel")
    AaynForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")


@functools.cache
def _sentencepiece_key():
    """The config class `FairseqSentencePieceTokenizer` is registered under: a key only, no model uses it."""
    from transformers import PretrainedConfig

    return type("FairseqSentencePieceTokenizerKey", (PretrainedConfig,), {"model_type": "aayn-fairseq-sentencepiece"})


# the files that travel with a checkpoint (`model/*_aayn.py`; most import transformers, directly or through
# another): importing any of them first registers aayn once none is halfway through its import
_STEMS = tuple(path.stem for path in sorted((Path(__file__).parent / "model").glob("*_aayn.py")))
_MODEL_CODE = tuple(f"aayn.model.{stem}" for stem in _STEMS)


def _initializing(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and getattr(module.__spec__, "_initializing", False)


class _RegisterWhenReady(importlib.abc.MetaPathFinder):
    """Runs `register()` at the first moment transformers is imported and none of aayn's model files is halfway
    through its own import (they import transformers themselves), then steps aside."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "transformers" and fullname not in _MODEL_CODE:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            others = [name for name in _MODEL_CODE if name != fullname]
            if self in sys.meta_path and "transformers" in sys.modules and not any(map(_initializing, others)):
                sys.meta_path.remove(self)
                register()

        spec.loader.exec_module = exec_module
        return spec


def register_later() -> None:
    """For the `aayn` command: no registration on `import transformers` (parsing a recipe imports it); each
    command calls `register()` once its arguments are known to be good."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _RegisterWhenReady)]


if "transformers" in sys.modules:
    register()
elif not any(isinstance(finder, _RegisterWhenReady) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWhenReady())
