"""aayn: the "Attention Is All You Need" Transformer as a first-class Hugging Face model.

`import aayn` registers model type "aayn" with AutoConfig, AutoModel and AutoModelForSeq2SeqLM, and marks the
classes so that `save_pretrained` copies their code into the checkpoint (loadable with trust_remote_code=True by
a process that never imports aayn).

Nothing heavy is imported here, so that `aayn --help` answers at once: the classes load on first use, and the
registration runs as soon as transformers is imported (at once if it already is).

Why a `sys.meta_path` finder (`_RegisterWhenReady`) rather than registering at import, as other model packages
do: registering needs the model classes, hence torch and transformers, which take seconds to import, and the
`aayn` command lives in this package, so every `aayn --help` and every mistyped recipe key would wait for them.
The finder keeps `import aayn` cheap and still registers before an Auto class can be used (they live in
transformers), which is what `import aayn` promises. The command line removes the finder and registers once
its arguments are known to be good.
"""

import importlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"

_CLASSES = {
    "AaynConfig": "configuration_aayn",
    "AaynForConditionalGeneration": "modeling_aayn",
    "AaynModel": "modeling_aayn",
    "AaynPreTrainedModel": "modeling_aayn",
    "AaynTranslationPipeline": "pipeline_aayn",
}


class MissingExtra(ImportError):
    """A package an optional feature needs is not installed; the message names what to `pip install`."""


def lazy_attributes(package: str, modules: dict[str, str]):
    """A module `__getattr__` (PEP 562) that imports `package.modules[name]` when `name` is first used."""

    def __getattr__(name: str):
        if name in modules:
            return getattr(importlib.import_module(f".{modules[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = lazy_attributes(__name__, _CLASSES)


def register() -> None:
    """Register model type "aayn" with transformers' Auto classes (safe to call again)."""
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

    from .configuration_aayn import AaynConfig
    from .modeling_aayn import AaynForConditionalGeneration, AaynModel
    from .tokenization_fairseq_aayn import FairseqMosesBPETokenizer

    AutoConfig.register(AaynConfig.model_type, AaynConfig, exist_ok=True)
    # an imported fairseq folder's Moses + BPE tokenizer, known by name (its folder's copy needs no trust here)
    AutoTokenizer.register(AaynConfig, slow_tokenizer_class=FairseqMosesBPETokenizer, exist_ok=True)
    AutoModel.register(AaynConfig, AaynModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(AaynConfig, AaynForConditionalGeneration, exist_ok=True)
    AaynConfig.register_for_auto_class()
    AaynModel.register_for_auto_class("AutoModel")
    AaynForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")


# the files that travel with a checkpoint (`*_aayn.py`; most import transformers, directly or through another):
# importing any of them first registers aayn once none is halfway through its import
_MODEL_CODE = tuple(f"aayn.{path.stem}" for path in sorted(Path(__file__).parent.glob("*_aayn.py")))


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


def _register_later() -> None:
    """For the `aayn` command: no registration on `import transformers` (parsing a recipe imports it); each
    command calls `register()` once its arguments are known to be good."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _RegisterWhenReady)]


if "transformers" in sys.modules:
    register()
elif not any(isinstance(finder, _RegisterWhenReady) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWhenReady())


# peft's LoRA `target_modules` for every projection of the model (peft keeps its defaults in its own table of
# transformers' model types, which a model outside transformers cannot join): self-attention's fused Q/K/V,
# encoder-decoder attention's query and fused K/V, every attention's output, both feed-forward layers. Add
# "lm_head" to adapt the (tied) output layer too.
LORA_TARGET_MODULES = ["qkv_proj", "q_proj", "kv_proj", "out_proj", "fc1", "fc2"]


def generate_ensemble(models, input_ids, attention_mask=None, **kwargs):
    """§6.1's search over an ensemble of models sharing a vocabulary (see `generation_aayn.generate_ensemble`)."""
    from .generation_aayn import generate_ensemble as ensemble

    return ensemble(models, input_ids, attention_mask, **kwargs)


def translation_pipeline(model, **kwargs):
    """`pipeline("translation")` for an AAYN model where aayn is installed (no `trust_remote_code` needed)."""
    from transformers import pipeline

    from .pipeline_aayn import AaynTranslationPipeline

    return pipeline("translation", model=model, pipeline_class=AaynTranslationPipeline, **kwargs)


__all__ = [
    "LORA_TARGET_MODULES",
    "AaynConfig",
    "AaynForConditionalGeneration",
    "AaynModel",
    "AaynPreTrainedModel",
    "AaynTranslationPipeline",
    "generate_ensemble",
    "register",
    "translation_pipeline",
]
