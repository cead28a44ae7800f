"""The Hub's inference request shape on `aayn serve`: `POST /translate` with `{"inputs": "text" or [...],
"parameters": {...}}`, answered `[{"translation_text": "..."}, ...]` in input order (with `num_return_sequences`
above 1: a list per input, each hypothesis with its `score`); its errors (400, 422 for its limits as
text-generation-inference answers them, 503 with Retry-After) and its part of the OpenAPI description
(`openapi_shape`). The room reads the request and writes the answer; the service (`service.py`) translates."""

from __future__ import annotations

import json
import math

from ..model.policy_aayn import returned_fault
from .settings import (
    GLOSSARY,
    GLOSSARY_SCHEMA,
    Limits,
    RequestError,
    ServeSettings,
    read_alignment,
    read_glossary,
    read_texts,
)

# the parameters a request may set, with what each must be (the generation options `aayn translate` takes)
MAX_BEAMS = 16  # a request's beams and hypotheses: a search of a client's own size would hold everyone's memory
MAX_NEW_TOKENS = 1 << 16  # past any folder's length limit, which caps the search anyway
MAX_ALPHA = 10.0
PARAMETERS = {
    "num_beams": f"an integer from 1 to {MAX_BEAMS}",
    "length_penalty": f"a number from -{MAX_ALPHA:g} to {MAX_ALPHA:g}",
    "max_new_tokens": f"an integer from 1 to {MAX_NEW_TOKENS}",
    "num_return_sequences": f"an integer from 1 to {MAX_BEAMS}, at most num_beams",
    "glossary": GLOSSARY,
    "alignment": "true or false: each translation with its word alignment (links of token positions)",
}


def read_request(body: bytes, settings: ServeSettings, char_limit: int = 0) -> tuple[list[str], dict]:
    """(the texts, the generation options) of a request body (one text alone is a list of one, as the Hub's API
    answers it), or RequestError; `char_limit`: characters per text (0: the server's)."""
    char_limit = char_limit or settings.max_chars
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise RequestError(f"the body is not JSON ({error})") from None
    if not isinstance(request, dict) or "inputs" not in request:
        raise RequestError('the body must be a JSON object with "inputs" (a text or a list of texts)')
    unknown = sorted(set(request) - {"inputs", "parameters", "options"})
    if unknown:
        raise RequestError(f"unknown field {unknown[0]!r} (the body takes inputs and parameters)")
    texts = [request["inputs"]] if isinstance(request["inputs"], str) else request["inputs"]
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise RequestError('"inputs" must be a text or a list of texts')
    if len(texts) > settings.max_sentences:
        raise RequestError(f"{len(texts)} inputs: at most {settings.max_sentences} a request (--batch_limit)", 422)
    for i, text in enumerate(texts):
        if len(text) > char_limit:
            raise RequestError(f"input {i} has {len(text)} characters: at most {char_limit} (--char_limit)", 422)
    read_texts(texts, "inputs", not isinstance(request["inputs"], str))
    parameters = request.get("parameters")
    return texts, read_parameters({} if parameters is None else parameters)


def read_parameters(parameters) -> dict:
    if not isinstance(parameters, dict):
        raise RequestError('"parameters" must be a JSON object')
    parameters = dict(parameters)
    for name, value in parameters.items():
        if name not in PARAMETERS:
            raise RequestError(f"unknown parameter {name!r} (known: {', '.join(PARAMETERS)})")
        if name == "glossary":
            parameters[name] = read_glossary(value)
            continue
        if name == "alignment":
            parameters[name] = read_alignment(value)
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if name == "length_penalty":
            good = number and math.isfinite(value) and abs(value) <= MAX_ALPHA
        else:
            if isinstance(value, float) and value.is_integer():  # JSON's 4.0 is an integer to JSON Schema
                value = parameters[name] = int(value)
            top = MAX_NEW_TOKENS if name == "max_new_tokens" else MAX_BEAMS
            good = number and isinstance(value, int) and 1 <= value <= top
        if not good:
            raise RequestError(f"parameter {name} must be {PARAMETERS[name]}, got {json.dumps(value)}")
    fault = returned_fault(parameters.get("num_return_sequences", 1), parameters.get("num_beams"))
    if fault:
        raise RequestError(f"parameter {fault}")
    if parameters.get("alignment") is None:
        parameters.pop("alignment", None)
    return parameters


async def translate(service, body: bytes, request) -> tuple[object, int]:
    """`POST /translate` in the Hub's shape, for the service's first pair: (answer, status), or RequestError. A key
    comes as the Hub's clients send their token: `Authorization: Bearer KEY`."""
    authorization = request.headers.get("authorization", "")
    key = authorization[7:].strip() if authorization.lower().startswith("bearer ") else None
    char_limit = service.admit(request, key)
    texts, options = read_request(body, service.settings, char_limit)
    pair = service.pairs[0]
    for ability in ("glossary", "alignment"):
        if ability in options:
            pair.require(ability)
    best = await service.translated(pair, texts, options, request, "the model failed")
    if best is None:
        return {"error": "the client went away"}, 499
    if options.get("num_return_sequences", 1) == 1:
        return [hub_item(hypotheses[0], False) for hypotheses in best], 200
    return [[hub_item(hypothesis, True) for hypothesis in hypotheses] for hypotheses in best], 200


def hub_item(hypothesis: tuple, scored: bool) -> dict:
    """One hypothesis in the Hub's shape: its text, its score where asked for n-best, its alignment where asked."""
    item = {"translation_text": hypothesis[1]}
    if scored:
        item["score"] = hypothesis[0]
    if len(hypothesis) > 2:
        item.update(hypothesis[2].as_dict())
    return item


def openapi_shape(limits: Limits) -> tuple[dict, dict]:
    """(the request body's schema, the 200 answer's schema) of the Hub's shape of `POST /translate`, within `limits`;
    num_return_sequences at most num_beams where that is given (else the search takes as many beams)."""
    parameters = {
        "num_beams": {"type": "integer", "minimum": 1, "maximum": MAX_BEAMS},
        "length_penalty": {"type": "number", "minimum": -MAX_ALPHA, "maximum": MAX_ALPHA, "description": "alpha"},
        "max_new_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_NEW_TOKENS},
        "num_return_sequences": {"type": "integer", "minimum": 1, "maximum": MAX_BEAMS},
        "glossary": GLOSSARY_SCHEMA,
        "alignment": {"type": "boolean", "description": PARAMETERS["alignment"]},
    }
    at_most_beams = [
        {"if": {"properties": {"num_beams": {"const": beams}}, "required": ["num_beams"]},
         "then": {"properties": {"num_return_sequences": {"maximum": beams}}}}
        for beams in range(1, MAX_BEAMS)
    ]  # fmt: skip
    options = {"type": ["object", "null"], "properties": parameters, "additionalProperties": False,
               "allOf": at_most_beams}  # fmt: skip
    body = {
        "title": "the Hub's inference shape",
        "type": "object",
        "required": ["inputs"],
        "properties": {"inputs": limits.texts(), "parameters": options, "options": {"description": "ignored"}},
        "additionalProperties": False,
    }
    one = {"type": "object", "properties": {"translation_text": {"type": "string"}, "score": {"type": "number"}}}
    answer = {"type": "array", "items": {"oneOf": [one, {"type": "array", "items": one}]}}
    return body, answer
