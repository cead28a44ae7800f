"""aayn: the "Attention Is All You Need" Transformer as a first-class Hugging Face model.

Importing the package registers model type "aayn" with AutoConfig, AutoModel and AutoModelForSeq2SeqLM, and marks
the classes so that `save_pretrained` copies their code into the checkpoint (loadable with trust_remote_code=True
by a process that never imports aayn).
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_aayn import AaynConfig
from .modeling_aayn import AaynForConditionalGeneration, AaynModel, AaynPreTrainedModel
from .pipeline_aayn import AaynTranslationPipeline

__version__ = "0.1.0"

AutoConfig.register(AaynConfig.model_type, AaynConfig, exist_ok=True)
AutoModel.register(AaynConfig, AaynModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(AaynConfig, AaynForConditionalGeneration, exist_ok=True)
AaynConfig.register_for_auto_class()
AaynModel.register_for_auto_class("AutoModel")
AaynForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")



def translation_pipeline(model, **kwargs):
    """`pipeline("translation")` for an AAYN model where aayn is installed (no `trust_remote_code` needed)."""
    from transformers import pipeline

    return pipeline("translation", model=model, pipeline_class=AaynTranslationPipeline, **kwargs)


__all__ = [
    "AaynConfig",
    "AaynForConditionalGeneration",
    "AaynModel",
    "AaynPreTrainedModel",
    "AaynTranslationPipeline",
    "translation_pipeline",
]
