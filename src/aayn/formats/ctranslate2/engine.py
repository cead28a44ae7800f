"""The CTranslate2 engine: translating with a folder that `aayn export` wrote, without torch.

Importing torch and transformers is most of what a plain `aayn translate` call costs (docs/measurements.md); an
exported folder needs neither, except an imported fairseq folder's Moses + BPE tokenizer (Python, in transformers).
Its tokenizer is read with `tokenizers` (what transformers' fast tokenizer wraps: the same ids and the same text),
its generation config as JSON; batching and the length limit are the `Translator` template's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ...checks import json_fault, python_tokenizer_class
from ...model.policy_aayn import length_penalty as penalty_of_length
from ..translator import DecodingSettings, Translator
from . import CT2_RULES, CTranslate2Folder, import_ctranslate2

NO_LIMIT = int(1e30)  # transformers' model_max_length when a tokenizer sets none (VERY_LARGE_INTEGER)


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

    def target_ids(self, tokens: list[str]) -> list[int]:
        return [self.backend.token_to_id(token) for token in tokens]

    def text(self, tokens: list[str]) -> str:
        decoder = self.backend.decoder
        return decoder.decode(tokens) if decoder is not None else " ".join(tokens)


class PythonExportedTokenizer:
    """An imported folder's Python tokenizer, the class `name`: fairseq's (`tokenization_fairseq_aayn`, with
    transformers: Moses + BPE, or SentencePiece reading pieces its dictionary lacks as <unk>) or transformers'
    `MarianTokenizer`: the same answers."""

    def __init__(self, folder: str | Path, name: str):
        import transformers

        from ...model import tokenization_fairseq_aayn

        kind = getattr(tokenization_fairseq_aayn, name, None) or getattr(transformers, name)  # Marian's: transformers'
        self.tokenizer = kind.from_pretrained(str(Path(folder).expanduser()))
        self.source_tokens = {index: token for token, index in self.tokenizer.get_vocab().items()}
        self.model_max_length = self.tokenizer.model_max_length
        self.special_tokens = {self.tokenizer.eos_token, self.tokenizer.pad_token}

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenizer(text)["input_ids"] for text in texts]

    def tokens(self, ids: list[int]) -> list[str]:
        return [self.source_tokens[i] for i in ids]

    def target_ids(self, tokens: list[str]) -> list[int]:
        vocabulary = getattr(self.tokenizer, "target_encoder", None) or self.tokenizer.get_vocab()
        return [vocabulary[token] for token in tokens]

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


def max_decoding_length(limit: int) -> int:
    """CTranslate2's `max_decoding_length` for a sentence's limit (the most target tokens, eos counted). Our search
    counts the eos it forces at the limit among those tokens; CTranslate2 stops at its limit without one, so its
    limit is one less: the same text either way."""
    return max(limit - 1, 1)


def ct2_fault(settings: DecodingSettings) -> str | None:
    """Why CTranslate2 cannot run `settings`' beam search exactly, or None. Greedy decoding it runs under any rules;
    a beam search with alpha != 0 under its own rules (`CT2_RULES`); with alpha 0 it stops once the best candidate
    ends, which returns what the exact rule ("never") returns, lp being 1."""
    if settings.num_beams == 1:
        return None
    if settings.min_new_tokens > 1:  # CTranslate2 bans eos before its softmax: beyond the first token, not ours
        return f"CTranslate2 cannot run a beam search with min_new_tokens {settings.min_new_tokens} (at most 1)"
    if settings.length_penalty == 0:
        if settings.early_stopping == "never":
            return None
        runs = "with alpha 0 it stops once its best candidate ends (the exact rule)"
    elif settings.early_stopping is True and settings.normalization == "fairseq":
        return None
    else:
        runs = "its own ranks by log P / |Y|^alpha and stops at k finished hypotheses (fairseq's)"
    return (
        f"CTranslate2 cannot run this search (lp: {settings.normalization}, stopping rule: "
        f"{settings.early_stopping!r}): {runs}; decode greedily (--num_beams 1), or give the aayn folder"
    )


class ExportedModel(Translator):
    """A CTranslate2 model folder (`aayn export`: tokenizer and generation config beside the model), loaded once
    onto `device` ("cpu", "cuda", "cuda:N"), translating as `aayn.formats.aayn.engine.TorchTranslator.nbest` does: the
    same batches, each sentence under the folder's length limit (sources of one length decoded together: CTranslate2
    has one limit per call); the beam size and alpha of the exported generation config unless given. The folder
    states CTranslate2's own beam-search rules (`CT2_RULES`; a folder exported before aayn wrote them is read as
    stating them): the torch engine under the same rules gives the same text. A search CTranslate2 cannot run
    (`ct2_fault`) is refused in one line. At a sentence's length limit, where our search forces eos, a beam
    search of CTranslate2 ranks its last candidates without it: a hypothesis that long may differ."""

    kind, abilities = CTranslate2Folder.name, CTranslate2Folder.abilities

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
        self.generation = {**CT2_RULES, **(read_json(path) if path.is_file() else {})}
        ct2_config = folder / "config.json"
        self.eos = (read_json(ct2_config) if ct2_config.is_file() else {}).get("eos_token", "</s>")
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

    def reseed(self, seed: int) -> None:
        import_ctranslate2().set_random_seed(seed)

    def best_ids(self, sources: list[list[int]], settings: DecodingSettings) -> list[list[int]]:
        found = self.translate_tokens([self.tokenizer.tokens(ids) for ids in sources], settings)
        return [self.tokenizer.target_ids(result.hypotheses[0]) for result in found]

    def translate_tokens(self, tokens: list[list[str]], settings: DecodingSettings, attention: bool = False) -> list:
        """Each source's (pieces) `Found`, in order. CTranslate2 has one length limit per call: the sources are
        decoded in groups of one length, so that each keeps its own limit (the folder's, as aayn's search) and no
        translation depends on its batch-mates."""
        by_length: dict[int, list[int]] = {}
        for index, source in enumerate(tokens):
            by_length.setdefault(len(source), []).append(index)
        results = [None] * len(tokens)
        for length, indices in by_length.items():
            group = [tokens[i] for i in indices]
            found = self.translate_group(group, length, settings, attention)
            if settings.num_beams > 1:  # a search that reached the limit: all it finished, to rank them as ours
                again = [j for j, result in enumerate(found) if any(h[-1:] != [self.eos] for h in result.hypotheses)]
                if again:
                    redone = self.translate_group([group[j] for j in again], length, settings, attention, patience=2)
                    for j, result in zip(again, redone):
                        found[j] = result
            for index, result in zip(indices, self.finished(group, found, settings)):
                results[index] = result
        return results

    def finished(self, sources: list[list[str]], results: list, settings: DecodingSettings) -> list[Found]:
        """CTranslate2's results as our search gives them: pieces without eos, scored log P / lp(|Y|) by the
        folder's lp, |Y| counting eos, the `settings.nbest` best. A hypothesis that reached the limit (no eos: there
        CTranslate2 stops without one) gets eos's log-probability added, as our search forces eos there. Where eos
        may not come first (`min_new_tokens` 1: fairseq's --min-len), CTranslate2 bans it before its softmax, which
        raises every first token's log-probability by the same -log(1 - P(eos first)); ours, as fairseq, bans it
        after, so that much is taken off again."""
        alpha, normalization = settings.length_penalty, settings.normalization
        found, short = [], []
        shift = self.first_eos_shift(sources) if settings.min_new_tokens else [0.0] * len(sources)
        for row, (source, result) in enumerate(zip(sources, results)):
            rows = result.attention or [[] for _ in result.hypotheses]
            entry = Found([], [], [])
            for hypothesis, score, attention in zip(result.hypotheses, result.scores, rows):
                pieces = ended(hypothesis, self.eos)
                log_p = score * len(hypothesis) ** alpha if alpha else score  # CTranslate2's: log P / |Y|^alpha
                log_p -= shift[row]
                if len(pieces) == len(hypothesis):
                    short.append((row, len(entry.hypotheses), source, pieces))
                entry.hypotheses.append(pieces)
                entry.scores.append(log_p)
                entry.attention.append(attention[: len(pieces)])
            found.append(entry)
        if short:  # CTranslate2 appends eos to each target it scores
            scored = self.translator.score_batch([s for _, _, s, _ in short], [p for _, _, _, p in short])
            for (row, index, _, pieces), result in zip(short, scored):
                found[row].scores[index] = sum(result.log_probs)
        for entry in found:
            entry.scores = [log_p / penalty_of_length(len(pieces) + 1, alpha, normalization)
                            for log_p, pieces in zip(entry.scores, entry.hypotheses)]  # fmt: skip
            entry.keep_best(settings.nbest)
        return found

    def first_eos_shift(self, sources: list[list[str]]) -> list[float]:
        """Per source, -log(1 - P(eos as the first token)): what banning eos before the softmax adds to every
        hypothesis's first token."""
        scored = self.translator.score_batch(sources, [[] for _ in sources])  # the empty target: eos alone
        return [-math.log1p(-math.exp(result.log_probs[0])) for result in scored]

    def translate_group(
        self, tokens: list[list[str]], length: int, settings: DecodingSettings, attention: bool, patience: int = 1
    ):
        """CTranslate2's results for sources of one `length`, under that length's limit (the folder's rule); each
        hypothesis ends in eos, unless it reached the limit (`return_end_token`: |Y| counts eos, as ours). With
        `patience` 2, a search that reaches the limit (fewer than k finished before it, so fewer than 2k) is the
        same search, and returns all it finished (CTranslate2 returns at most k * patience)."""
        fault = ct2_fault(settings)
        if fault:
            raise ValueError(f"--model {self.folder}: {fault}")
        drawn = settings.sampling  # CTranslate2's sampling: top-k 0 draws from every token, as ours
        sampling = {} if drawn is None else dict(sampling_topk=drawn.top_k, sampling_topp=drawn.top_p,
                                                  sampling_temperature=drawn.temperature)  # fmt: skip
        try:
            return self.translator.translate_batch(
                tokens,
                beam_size=settings.num_beams,
                num_hypotheses=max(settings.nbest, settings.num_beams * patience),  # ranked again in `finished`
                patience=patience,
                **sampling,
                length_penalty=settings.length_penalty,
                max_decoding_length=max_decoding_length(settings.limits(length)),
                min_decoding_length=settings.min_new_tokens,  # CTranslate2's default, 1, bans eos first; ours: 0
                return_end_token=True,
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
            return [[(score, text(pieces).strip()) for pieces, score in zip(r.hypotheses, r.scores)] for r in results]
        from ..alignment import pieces_alignment

        special = set(self.tokenizer.special_tokens)
        return [[(score, text(pieces).strip(), pieces_alignment(rows, source, pieces, special))
                 for pieces, score, rows in zip(r.hypotheses, r.scores, r.attention)]
                for source, r in zip(tokens, results)]  # fmt: skip


@dataclass
class Found:
    """One source's hypotheses, best first: pieces without eos, scores (log P / lp(|Y|)), each piece's attention
    row (empty lists unless asked for)."""

    hypotheses: list
    scores: list
    attention: list

    def keep_best(self, count: int) -> None:
        order = sorted(range(len(self.scores)), key=lambda i: -self.scores[i])[:count]
        self.hypotheses, self.scores = [self.hypotheses[i] for i in order], [self.scores[i] for i in order]
        self.attention = [self.attention[i] for i in order]


def ended(hypothesis: list[str], eos: str) -> list[str]:
    """A hypothesis's pieces without its eos (`return_end_token` keeps it, so that |Y| counts it)."""
    return hypothesis[:-1] if hypothesis and hypothesis[-1] == eos else hypothesis
