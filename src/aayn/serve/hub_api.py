"""The Hub's inference request shape on `aayn serve`: `POST /translate` with `{"inputs": "text" or [...],
"parameters": {...}}`, answered `[{"translation_text": "..."}, ...]` in input order (with `num_return_sequences`
above 1: a list per input, each hypothesis with its `score`); its errors (400, 413, 503 with Retry-After) and its
part of the OpenAPI description (`openapi_shape`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ..policy_aayn import returned_fault
from ..translator import DECODING_BATCH_TOKENS

# the parameters a request may set, with what each must be (the generation options `aayn translate` takes)
PARAMETERS = {
    "num_beams": "an integer >= 1",
    "length_penalty": "a finite number",
    "max_new_tokens": "an integer >= 1",
    "num_return_sequences": "an integer >= 1, at most num_beams",
    "glossary": "an object {source term: target term} or a list of [source term, target term] pairs",
    "alignment": "true or false: each translation with its word alignment (links of token positions)",
}


class RequestError(ValueError):
    """What is wrong with a request, in one line, and the HTTP status that says so."""

    def __init__(self, message: str, status: int = 400, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


@dataclass
class ServeSettings:
    batch_tokens: int = DECODING_BATCH_TOKENS
    max_wait_ms: float = 10.0
    max_queue: int = 1024  # sentences waiting or being decoded
    max_sentences: int = 64  # per request
    max_chars: int = 2000  # per sentence


def read_request(body: bytes, settings: ServeSettings) -> tuple[list[str], dict]:
    """(the texts, the generation options) of a request body (one text alone is a list of one, as the Hub's API
    answers it), or RequestError."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
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
        raise RequestError(f"{len(texts)} inputs: at most {settings.max_sentences} a request (--max_sentences)", 413)
    for i, text in enumerate(texts):
        if len(text) > settings.max_chars:
            raise RequestError(f"input {i} has {len(text)} characters: at most {settings.max_chars} (--max_chars)", 413)
    return texts, read_parameters(request.get("parameters") or {})


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
        if name == "length_penalty":
            good = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            good = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        if not good:
            raise RequestError(f"parameter {name} must be {PARAMETERS[name]}, got {json.dumps(value)}")
    fault = returned_fault(parameters.get("num_return_sequences", 1), parameters.get("num_beams"))
    if fault:
        raise RequestError(f"parameter {fault}")
    if parameters.get("alignment") is None:
        parameters.pop("alignment", None)
    return parameters


def read_alignment(value):
    """A request's `alignment` (true or false) as the translator's `AlignmentSettings` (None: not asked)."""
    from ..alignment import AlignmentSettings

    if not isinstance(value, bool):
        raise RequestError(f"Invalid request: alignment must be true or false, got {json.dumps(value)}")
    return AlignmentSettings() if value else None


def read_glossary(value):
    """A request's `glossary` (JSON or TSV text; never a path on the server), or RequestError naming the fault."""
    from ..glossary_aayn import Glossary

    if not isinstance(value, (str, dict, list)):
        raise RequestError(f"glossary must be {PARAMETERS['glossary']}")
    try:
        return Glossary.parse(value, files=False)
    except ValueError as error:
        raise RequestError(f"Invalid request: glossary: {error}") from None


def openapi_shape() -> tuple[dict, dict]:
    """(the request body's schema, the 200 answer's schema) of the Hub's shape of `POST /translate`."""
    texts = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    parameters = {
        "num_beams": {"type": "integer", "minimum": 1},
        "length_penalty": {"type": "number", "description": "GNMT's alpha"},
        "max_new_tokens": {"type": "integer", "minimum": 1},
        "num_return_sequences": {"type": "integer", "minimum": 1},
        "glossary": {"type": ["object", "array"], "description": PARAMETERS["glossary"]},
        "alignment": {"type": "boolean", "description": PARAMETERS["alignment"]},
    }
    body = {
        "title": "the Hub's inference shape",
        "type": "object",
        "required": ["inputs"],
        "properties": {"inputs": texts, "parameters": {"type": "object", "properties": parameters}},
    }
    one = {"type": "object", "properties": {"translation_text": {"type": "string"}, "score": {"type": "number"}}}
    answer = {"type": "array", "items": {"oneOf": [one, {"type": "array", "items": one}]}}
    return body, answer
