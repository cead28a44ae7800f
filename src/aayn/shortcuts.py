"""The package's shortcuts: peft's LoRA target modules, the ensemble search and the translation pipeline, each
importing torch or transformers only when called."""

# peft's LoRA `target_modules` for every projection of the model (peft keeps its defaults in its own table of
# transformers' model types, which a model outside transformers cannot join): self-attention's fused Q/K/V,
# encoder-decoder attention's query and fused K/V, every attention's output, both feed-forward layers. Add
# "lm_head" to adapt the (tied) output layer too.
LORA_TARGET_MODULES = ["qkv_proj", "q_proj", "kv_proj", "out_proj", "fc1", "fc2"]


def generate_ensemble(models, input_ids, attention_mask=None, **kwargs):
    """§6.1's search over an ensemble of models sharing a vocabulary (see `generation_aayn.generate_ensemble`)."""
    from .model.generation_aayn import generate_ensemble as ensemble

    return ensemble(models, input_ids, attention_mask, **kwargs)


def translation_pipeline(model, **kwargs):
    """`pipeline("translation")` for an AAYN model where aayn is installed (no `trust_remote_code` needed)."""
    from transformers import pipeline

    from .model.pipeline_aayn import AaynTranslationPipeline

    return pipeline("translation", model=model, pipeline_class=AaynTranslationPipeline, **kwargs)
