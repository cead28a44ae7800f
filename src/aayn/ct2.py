"""The CTranslate2 engine: translating with a folder that `aayn export` wrote, without torch.

Importing torch and transformers is most of what a plain `aayn translate` call costs (docs/measurements.md); an
exported folder needs neither, except an imported fairseq folder's Moses + BPE tokenizer (Python, in transformers).
Its tokenizer is read with `tokenizers` (what transformers' fast tokenizer wraps: the same ids and the same text),
its generation config as JSON; batching and the length limit are the `Translator` template's.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import MissingExtra
from .checks import json_fault, python_tokenizer_class
from .policy_aayn import paper_length_limit
from .translator import DecodingSettings, Translator

NO_LIMIT = int(1e30)  # transformers' model_max_length when a tokenizer sets none (VERY_LARGE_INTEGER)


def import_ctranslate2():
    try:
        import ctranslate2
    except ImportError as error:
        raise MissingExtra("CTranslate2 models need the ctranslate2 package: pip install 'aayn[ct2]'") from error
    return ctranslate2


def read_json(path: Path) -> dict:
    fault = json_fault(path)
    if fault:
        raise ValueError(f"--model: {fault}")
    return json.loads(path.read_text(encoding="utf-8"))


def exported_tokenizer(folder: str | Path):
    """The tokenizer `aayn export` copied beside the model: `ExportedTokenizer`, or an imported fairseq folder's
    Python one (`PythonExportedTokenizer`). Either answers `encode`, `tokens`, `text` and `model_max_length`."""
    folder = Path(folder).expanduser()
    name = python_tokenizer_class(folder)
    return PythonExportedTokenizer(folder, name) if name else ExportedTokenizer(folder)


class ExportedTokenizer:
    """What translating needs of aayn's tokenizer.json, read with `tokenizers` alone: the ids and the text of
    `AutoTokenizer.from_pretrained(folder)` (a `PreTrainedTokenizerFast` over the same tokenizer.json, its eos
    appended by the file's post-processor)."""

    def __init__(self, folder: str | Path):
        from tokenizers import Tokenizer

        folder = Path(folder).expanduser()
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"--model {folder}: no tokenizer.json in the folder (`aayn export` writes one)")
        try:
            self.backend = Tokenizer.from_file(str(path))
        except Exception as error:  # noqa: BLE001  tokenizers raises a bare Exception for a damaged file
            raise ValueError(f"--model {folder}: cannot read {path} ({error}); was its save cut short?") from None
        self.backend.no_truncation()  # transformers sets both per call: none unless asked
        self.backend.no_padding()
        config_path = folder / "tokenizer_config.json"
        config = read_json(config_path) if config_path.is_file() else {}
        self.model_max_length = config.get("model_max_length") or NO_LIMIT
        named = [config.get(key) for key in ("eos_token", "pad_token")]
        # eos and pad, as alignments leave them out (fairseq's rule)
        self.special_tokens = {t["content"] if isinstance(t, dict) else t for t in named if t}

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.backend.encode_batch(texts)]

    def tokens(self, ids: list[int]) -> list[str]:
        return [self.backend.id_to_token(i) for i in ids]

    def text(self, tokens: list[str]) -> str:
        decoder = self.backend.decoder
        return decoder.decode(tokens) if decoder is not None else " ".join(tokens)


class PythonExportedTokenizer:
    """An imported fairseq folder's Python tokenizer (`tokenization_fairseq_aayn`, with transformers: Moses + BPE,
    or SentencePiece reading pieces its dictionary lacks as <unk>), the class `name`: the same answers."""

    def __init__(self, folder: str | Path, name: str):
        from . import tokenization_fairseq_aayn

        self.tokenizer = getattr(tokenization_fairseq_aayn, name).from_pretrained(str(Path(folder).expanduser()))
        self.source_tokens = {index: token for token, index in self.tokenizer.get_vocab().items()}
        self.model_max_length = self.tokenizer.model_max_length
        self.special_tokens = {self.tokenizer.eos_token, self.tokenizer.pad_token}

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenizer(text)["input_ids"] for text in texts]

    def tokens(self, ids: list[int]) -> list[str]:
        return [self.source_tokens[i] for i in ids]

    def text(self, tokens: list[str]) -> str:
        return self.tokenizer.convert_tokens_to_string(tokens)


def device_options(device: str, ctranslate2) -> dict:
    """CTranslate2's `device` and `device_index` for a --device value, or one line saying why not."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise ValueError(f"--device {device}: a CTranslate2 model runs on cpu or cuda (cuda:N)")
    if kind == "cuda":
        count = ctranslate2.get_cuda_device_count()
        if count == 0:
            raise ValueError(f"--device {device}: CTranslate2 sees no CUDA device on this machine; it runs on cpu")
        if int(index or 0) >= count:
            raise ValueError(f"--device {device}: this machine has {count} CUDA device(s)")
    return {"device": kind, "device_index": int(index or 0)}


def max_decoding_length(longest_source: int, max_new_tokens: int | None = None) -> int:
    """CTranslate2's `max_decoding_length` for aayn's limit, §6.1's source + 50 tokens (within `max_new_tokens`).
    Our search counts the eos it forces at the limit among those tokens; CTranslate2 stops at its limit without
    one, so its limit is one less: the same text either way."""
    limit = paper_length_limit(longest_source)
    limit = limit if max_new_tokens is None else min(limit, max_new_tokens)
    return max(limit - 1, 1)


class ExportedModel(Translator):
    """A CTranslate2 model folder (`aayn export`: tokenizer and generation config beside the model), loaded once
    onto `device` ("cpu", "cuda", "cuda:N"), translating as `aayn.translate.TorchTranslator.nbest` does: the same
    batches and the same limits, §6.1's source length + 50 for each sentence (sources of one length decoded
    together: CTranslate2 has one limit per call); the beam size and
    alpha of the exported generation config unless given. CTranslate2 ranks finished hypotheses by
    log P / |Y|^alpha, not by GNMT's penalty, so beam outputs may differ from aayn's; greedy ones are equal."""

    kind = "ctranslate2"
    abilities = frozenset({"alignment"})  # the export's own: the last layer, all heads

    def __init__(self, folder: str | Path, device: str = "cpu", threads: int | None = None, **engine):
        """`threads`: CTranslate2's `intra_threads` (default: all cores); `engine`: more of
        `ctranslate2.Translator`'s options (compute_type: the benchmark's)."""
        ctranslate2 = import_ctranslate2()
        self.folder = folder = Path(folder).expanduser()
        self.name = str(folder)
        options = {**device_options(device, ctranslate2), **engine, **({"intra_threads": threads} if threads else {})}
        self.tokenizer = exported_tokenizer(folder)
        self.source_limit = self.tokenizer.model_max_length
        path = folder / "generation_config.json"
        # GenerationConfig.save_pretrained writes only what differs from its defaults (1 beam, alpha 1.0)
        self.generation = read_json(path) if path.is_file() else {}
        try:
            self.translator = ctranslate2.Translator(str(folder), **options)
        except (RuntimeError, ValueError) as error:  # a damaged model.bin, a model from a newer CTranslate2
            raise ValueError(f"--model {folder}: CTranslate2 cannot load it ({error})") from None
        if options["device"] == "cuda":  # CTranslate2 loads CUDA's libraries at its first translation, not here
            try:
                self.translator.translate_batch([self.tokenizer.tokens(self.encode(["."])[0])], max_decoding_length=1)
            except RuntimeError as error:  # seen on a CUDA 13 machine: "Library libcublas.so.12 is not found ..."
                raise ValueError(
                    f"--device {device}: CTranslate2 {ctranslate2.__version__} cannot translate on this GPU ({error}); "
                    "its wheels are built for CUDA 12's libraries: install those, or use --device cpu"
                ) from None

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer.encode(texts)

    def translate_tokens(self, tokens: list[list[str]], settings: DecodingSettings, attention: bool = False) -> list:
        """CTranslate2's result for each source (pieces), in order. CTranslate2 has one length limit per call: the
        sources are decoded in groups of one length, so that each keeps its own limit (§6.1's, as aayn's search) and
        no translation depends on its batch-mates."""
        by_length: dict[int, list[int]] = {}
        for index, source in enumerate(tokens):
            by_length.setdefault(len(source), []).append(index)
        results = [None] * len(tokens)
        for length, indices in by_length.items():
            found = self.translate_group([tokens[i] for i in indices], length, settings, attention)
            for index, result in zip(indices, found):
                results[index] = result
        return results

    def translate_group(self, tokens: list[list[str]], length: int, settings: DecodingSettings, attention: bool):
        """CTranslate2's results for sources of one `length`, under that length's limit."""
        try:
            return self.translator.translate_batch(
                tokens,
                beam_size=settings.num_beams,
                num_hypotheses=settings.nbest,
                length_penalty=settings.length_penalty,
                max_decoding_length=max_decoding_length(length, settings.max_new_tokens),
                return_scores=True,
                return_attention=attention,
            )
        except RuntimeError as error:  # a position table shorter than a source and its 50 more tokens need
            if "position" not in str(error):
                raise
            raise ValueError(
                f"--model {self.folder}: {error}; export the model again (`aayn export` writes the "
                "positions that a source and its 50 more target tokens need)"
            ) from None

    def decode_batch(
        self, sources: list[list[int]], settings: DecodingSettings, prefixes: list[str] | None, alignment=None
    ) -> list[list[tuple]]:
        if alignment is not None and (alignment.layer is not None or alignment.heads is not None):
            raise ValueError(
                f"--model {self.folder} aligns with the layer and heads it was exported with (the last, all): "
                "give the aayn folder for --alignment_layer / --alignment_heads"
            )
        tokens = [self.tokenizer.tokens(ids) for ids in sources]
        results = self.translate_tokens(tokens, settings, attention=alignment is not None)
        text = self.tokenizer.text
        if alignment is None:
            return [[(score, text(tokens).strip()) for tokens, score in zip(r.hypotheses, r.scores)] for r in results]
        from .alignment import pieces_alignment

        special = set(self.tokenizer.special_tokens)
        aligned = []
        for source, r in zip(tokens, results):
            found = zip(r.hypotheses, r.scores, r.attention)
            aligned.append([(score, text(hypothesis).strip(), pieces_alignment(attention, source, hypothesis, special))
                            for hypothesis, score, attention in found])  # fmt: skip
        return aligned
