"""pipeline("translation") for AAYN checkpoints, on transformers 5.x (which removed the task) and 4.57.x.

This file travels with every saved checkpoint (like the model code) and `config.custom_pipelines` points to it,
so `pipeline("translation", model=path_or_hub_id, trust_remote_code=True)` finds it before transformers looks
at its own task list. It imports only torch and transformers.
"""

from __future__ import annotations

from transformers import Pipeline
from transformers.utils import logging

from .glossary_aayn import Glossary, term_ids

logger = logging.get_logger(__name__)


class AaynTranslationPipeline(Pipeline):
    """Translate text: `[{"translation_text": ...}]` per input, as transformers' TranslationPipeline did.

    Accepts one string or a list (batched with `batch_size=`); keyword arguments other than `max_source_length`
    and `glossary` go to `generate` (`num_beams`, `max_new_tokens`, `length_penalty`, `num_return_sequences`,
    ...). `tgt_lang` (a multi-target model's: OPUS-MT's, or one trained with `lang_pairs`): its `>>xx<<` token put
    before each input. `glossary` ({source term: target term}, a list of pairs, or a TSV file's path): each input's
    translation contains the target terms of the source terms it contains (glossary_aayn.py). An empty
    string translates to an empty string; an input longer than `max_source_length` tokens (default: what the
    model was trained for) is truncated with a warning.
    """

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False

    def _sanitize_parameters(self, max_source_length: int | None = None, glossary=None, tgt_lang: str | None = None,
                             src_lang: str | None = None, **generate_kwargs):  # fmt: skip
        preprocess = {} if max_source_length is None else {"max_source_length": max_source_length}
        if glossary is not None:
            preprocess["glossary"] = Glossary.parse(glossary)
        if tgt_lang is not None:  # src_lang, as TranslationPipeline takes it, counts where the sources carry theirs
            token = f">>{tgt_lang}<<"
            if token not in self.tokenizer.get_vocab():
                raise ValueError(f"tgt_lang={tgt_lang!r}: the model's vocabulary has no {token} (a multi-target "
                                 "model's targets each have one)")  # fmt: skip
            if getattr(self.model.config, "source_lang_token", False):  # fairseq's --encoder-langtok src
                source = f"__{src_lang}__"
                if src_lang is None or source not in self.tokenizer.get_vocab():
                    raise ValueError(f"src_lang={src_lang!r}: the model puts the source language's token before "
                                     "each text; give a source language it was trained on")  # fmt: skip
                token = f"{token} {source}"
            preprocess["target_token"] = token
        return preprocess, generate_kwargs, {}

    def __call__(self, inputs, **kwargs):
        results = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(result) == 1 for result in results):
            return [result[0] for result in results]  # one translation per input: a flat list, like the old pipeline
        return results

    def _default_max_source_length(self) -> int:
        return min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings)

    def preprocess(self, text: str, max_source_length: int | None = None, glossary: Glossary | None = None,
                   target_token: str | None = None):  # fmt: skip
        if not isinstance(text, str):
            raise TypeError(f"the translation pipeline takes a string or a list of strings, got {type(text).__name__}")
        limit = max_source_length or self._default_max_source_length()
        source = f"{target_token} {text}" if target_token and text.strip() else text
        inputs = self.tokenizer(source, return_tensors="pt")
        length = inputs["input_ids"].shape[1]
        if length > limit:
            logger.warning(f"input of {length} tokens truncated to max_source_length={limit}: {text[:60]!r}...")
            inputs = self.tokenizer(source, return_tensors="pt", truncation=True, max_length=limit)
        inputs["empty"] = not text.strip()
        if glossary is not None:
            inputs["terms"] = _Terms([term_ids(self.tokenizer, term) for term in glossary.terms_for(text)])
        return inputs

    def _forward(self, model_inputs, **generate_kwargs):
        empty = model_inputs.pop("empty")
        terms = model_inputs.pop("terms", None)
        if terms is not None:  # one input's, or (batch_size > 1) a list of each input's
            rows = terms if isinstance(terms, list) else [terms]
            generate_kwargs = {**generate_kwargs, "constraints": [row.phrases for row in rows]}
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        returned = output_ids.shape[0] // model_inputs["input_ids"].shape[0]
        return {"output_ids": output_ids.reshape(model_inputs["input_ids"].shape[0], returned, -1), "empty": empty}

    def postprocess(self, model_outputs):
        empty = model_outputs["empty"]
        empty = empty[0] if isinstance(empty, list) else empty
        texts = self.tokenizer.batch_decode(model_outputs["output_ids"][0], skip_special_tokens=True)
        return [{"translation_text": "" if empty else text.strip()} for text in texts]


class _Terms:
    """One input's target terms as token ids, kept whole through the pipeline's batching (not a list or tensor)."""

    def __init__(self, phrases: list[list[int]]):
        self.phrases = phrases
