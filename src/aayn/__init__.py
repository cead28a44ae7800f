"""aayn: the "Attention Is All You Need" Transformer as a first-class Hugging Face model.

Importing the package registers model type "aayn" with AutoConfig, AutoModel and AutoModelForSeq2SeqLM, and marks
the classes so that `save_pretrained` copies their code into the checkpoint (loadable with trust_remote_code=True
by a process that never imports aayn).
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_aayn import AaynConfig
from .modeling_aayn import AaynForConditionalGeneration, AaynModel, AaynPreTrainedModel

__version__ = "0.1.0"

AutoConfig.register(AaynConfig.model_type, AaynConfig, exist_ok=True)
AutoModel.register(AaynConfig, AaynModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(AaynConfig, AaynForConditionalGeneration, exist_ok=True)
AaynConfig.register_for_auto_class()
AaynModel.register_for_auto_class("AutoModel")
AaynForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = ["AaynConfig", "AaynPreTrainedModel", "AaynModel", "AaynForConditionalGeneration"]
