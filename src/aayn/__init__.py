"""aayn: the "Attention Is All You Need" Transformer as a first-class Hugging Face model.

`import aayn` registers model type "aayn" with AutoConfig, AutoModel and AutoModelForSeq2SeqLM, and marks the
classes so that `save_pretrained` copies their code into the checkpoint (loadable with trust_remote_code=True by
a process that never imports aayn).

Nothing heavy is imported here, so that `aayn --help` answers at once: the classes load on first use, and the
registration runs as soon as transformers is imported (at once if it already is).

Why a `sys.meta_path` finder (`registration.py`) rather than registering at import, as other model packages
do: registering needs the model classes, hence torch and transformers, which take seconds to import, and the
`aayn` command lives in this package, so every `aayn --help` and every mistyped recipe key would wait for them.
The finder keeps `import aayn` cheap and still registers before an Auto class can be used (they live in
transformers), which is what `import aayn` promises. The command line removes the finder and registers once
its arguments are known to be good.
"""

from .imports import MissingExtra, lazy_attributes
from .registration import register
from .shortcuts import LORA_TARGET_MODULES, generate_ensemble, translation_pipeline

__version__ = "0.1.0"

_CLASSES = {
    "AaynConfig": "model.configuration_aayn",
    "AaynForConditionalGeneration": "model.modeling_aayn",
    "AaynModel": "model.modeling_aayn",
    "AaynPreTrainedModel": "model.modeling_aayn",
    "AaynTranslationPipeline": "model.pipeline_aayn",
}
__getattr__ = lazy_attributes(__name__, _CLASSES)

__all__ = [
    "LORA_TARGET_MODULES",
    "AaynConfig",
    "AaynForConditionalGeneration",
    "AaynModel",
    "AaynPreTrainedModel",
    "AaynTranslationPipeline",
    "MissingExtra",
    "generate_ensemble",
    "register",
    "translation_pipeline",
]
