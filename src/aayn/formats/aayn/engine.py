"""Saved aayn models as a `Translator`: many sentences fast (batched by tokens, sorted by length) with the paper's
search, target prefixes, ensembles, and drawing cross-attention."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch.nn import functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ...data.token_batches import padded
from ...model.glossary_aayn import term_ids
from ...model.policy_aayn import FOLDER_RULES, folder_rules, source_limit
from ..alignment import attention_alignments
from ..translator import DecodingSettings, TextError, Translator
from . import AaynFolder


class TorchTranslator(Translator):
    """Saved aayn models (one, or an ensemble sharing its tokenizer) on a torch device: the paper's search
    (`generate`, `generate_ensemble`), with target prefixes; one model also samples, scores pairs and draws
    attention.
    `cuda_graphs`: the search's decoder steps replayed from CUDA graphs (`generate(cuda_graphs=True)`);
    `compiled_steps`: compiled by torch.compile (`generate(compiled_steps=True)`)."""

    def __init__(self, models: list[PreTrainedModel], tokenizer: PreTrainedTokenizerBase, name: str | None = None,
                 cuda_graphs: bool = False, compiled_steps: bool = False):  # fmt: skip
        self.models, self.tokenizer, self.cuda_graphs = list(models), tokenizer, cuda_graphs
        self.compiled_steps = compiled_steps
        self.model = self.models[0]
        self.name = name or getattr(self.model.config, "_name_or_path", None) or "the model"
        self.abilities = AaynFolder.abilities if len(self.models) == 1 else AaynFolder.ensembles
        config = self.model.generation_config
        rules = folder_rules({key: getattr(self.model.config, key, None) for key in FOLDER_RULES})
        self.generation = {"num_beams": config.num_beams, "length_penalty": config.length_penalty,
                           "min_new_tokens": config.min_new_tokens, **rules}  # fmt: skip
        self.source_limit = source_limit(tokenizer.model_max_length, self.model.config.max_position_embeddings)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, verbose=False)["input_ids"]

    def reseed(self, seed: int) -> None:
        torch.manual_seed(seed)  # every device's generator: transformers' sampling draws from torch's

    def encode_targets(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(text_target=texts, verbose=False)["input_ids"]

    def generate_options(self, settings: DecodingSettings) -> dict:
        """`generate()`'s keywords for `settings`: those that differ from the generation config, which gives the
        rest as the search reads it (transformers warns of a length penalty passed to a greedy search)."""
        saved = self.settings()
        options = {key: getattr(settings, key) for key in ("num_beams", "length_penalty")
                   if getattr(settings, key) != getattr(saved, key)}  # fmt: skip
        if settings.nbest > 1:
            options["num_return_sequences"] = settings.nbest
        if settings.sampling is not None:  # transformers' sampling, within §6.1's length limit (`generate`)
            drawn = settings.sampling
            options.update(do_sample=True, top_k=drawn.top_k, top_p=drawn.top_p, temperature=drawn.temperature)
        if settings.max_new_tokens is not None:  # eos counted, as the searches and CTranslate2 count it
            sampled = settings.sampling is not None  # transformers' sampling stops at its limit without an eos
            options["max_new_tokens"] = max(settings.max_new_tokens - sampled, 1)
        if self.cuda_graphs:
            options["cuda_graphs"] = True
        if self.compiled_steps:
            options["compiled_steps"] = True
        return options

    def check_terms(self, terms: list[list[str]], phrases: list[list[list[int]]], sources, settings) -> None:
        """TextError (the text's place in the batch) for a glossary target that no search can hold: one of no
        tokens or with eos or pad among them, or targets longer together than the sentence's length limit."""
        config, tokenizer = self.model.config, self.tokenizer
        banned = {config.eos_token_id, config.pad_token_id}
        for row, (words, ids, source) in enumerate(zip(terms, phrases, sources)):
            for term, phrase in zip(words, ids):
                special = [token for token in phrase if token in banned]
                if not phrase or special:
                    held = (
                        f"the special token {tokenizer.convert_ids_to_tokens(special[0])!r}" if special else "no tokens"
                    )
                    raise TextError(row, f"asks for the glossary target {term!r}, which holds {held}")
            limit = settings.limits(len(source))
            if sum(map(len, ids)) > limit - 1:
                count = sum(map(len, ids))
                raise TextError(row, f"asks for glossary targets of {count} tokens together: more than its length "
                                     f"limit ({limit} tokens, eos included) leaves room for")  # fmt: skip

    @torch.inference_mode()
    def decode_batch(
        self,
        sources: list[list[int]],
        settings: DecodingSettings,
        prefixes: list[str] | None,
        terms: list[list[str]] | None = None,
        alignment=None,
    ) -> list[list[tuple]]:
        model, tokenizer, nbest = self.model, self.tokenizer, settings.nbest
        inputs = padded(tokenizer, sources).to(model.device)
        if prefixes is not None:
            inputs.update(prefix_inputs(model, tokenizer, prefixes))
        options = self.generate_options(settings)
        if terms is not None:
            options["constraints"] = [[term_ids(tokenizer, term) for term in each] for each in terms]
            self.check_terms(terms, options["constraints"], sources, settings)
        if alignment is not None:  # kept by the search as it chooses each token (the first model's, in an ensemble)
            layer, heads = alignment.check(model.config)
            options.update(output_alignments=True, alignment_layer=layer, alignment_heads=heads)
        if len(self.models) > 1:
            from ...model.generation_aayn import generate_ensemble

            out = generate_ensemble(self.models, **inputs, **options, return_dict_in_generate=True)
        else:
            out = model.generate(**inputs, **options, return_dict_in_generate=True)
        texts = [text.strip() for text in tokenizer.batch_decode(out.sequences, skip_special_tokens=True)]
        scores = out.sequences_scores.tolist() if getattr(out, "sequences_scores", None) is not None else None
        if alignment is not None:
            rows = [sources[r // nbest] for r in range(len(texts))]
            targets = [produced(row, model.config) for row in out.sequences.tolist()]
            mask = inputs["attention_mask"].repeat_interleave(nbest, 0)
            texts = list(zip(texts, attention_alignments(out.alignments, mask, rows, targets, tokenizer, model.config)))
        # a glossary may leave fewer than nbest hypotheses that hold it: the others (scored -inf) are left out
        kept = [r == row * nbest or not scores or scores[r] > -math.inf for row in range(len(sources))
                for r in range(row * nbest, (row + 1) * nbest)]  # fmt: skip
        hypotheses = [(scores[r] if scores else math.nan, *(texts[r] if alignment is not None else (texts[r],)))
                      for r in range(len(texts))]  # fmt: skip
        rows = range(len(sources))
        return [[hypotheses[r] for r in range(row * nbest, (row + 1) * nbest) if kept[r]] for row in rows]

    @torch.inference_mode()
    def score_batch(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        model = self.model
        inputs = padded(self.tokenizer, sources).to(model.device)
        labels = torch.full((len(targets), max(map(len, targets))), -100, dtype=torch.long)
        for row, ids in enumerate(targets):
            labels[row, : len(ids)] = torch.tensor(ids)
        per_token = token_log_probs(model, inputs["input_ids"], inputs["attention_mask"], labels.to(model.device))
        return [per_token[row, : len(ids)].tolist() for row, ids in enumerate(targets)]

    def align_batch(self, sources: list[list[int]], targets: list[list[int]], settings) -> list:
        from ..alignment import align_ids

        return align_ids(self.model, self.tokenizer, sources, targets, settings)

    @torch.inference_mode()
    def plot_cross_attention(
        self,
        text: str,
        path: str | Path,
        *,
        per_head: bool = False,
        settings: DecodingSettings | None = None,
        alignment=None,
    ) -> str:
        """Translate `text`, then draw the last decoder layer's cross-attention (target rows, source columns) to a PNG,
        averaged over heads or one panel per head. `alignment` (`aayn.formats.alignment.AlignmentSettings`): draw
        that layer's attention instead, and its alignment's links over it (red squares). Returns the translation (one
        model only)."""
        model, tokenizer = self.model, self.tokenizer
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        inputs = tokenizer([text], return_tensors="pt").to(model.device)
        output = model.generate(**inputs, **self.generate_options(settings or self.settings()))[0]
        outputs = model(**inputs, decoder_input_ids=output[None, :-1], output_attentions=True)
        layer, links = -1, []
        if alignment is not None:
            from ..alignment import align_ids

            layer, heads = alignment.check(model.config)
            source_ids = inputs["input_ids"][0].tolist()
            found = align_ids(model, tokenizer, [source_ids], [produced(output.tolist(), model.config)], alignment)[0]
            special = {model.config.eos_token_id, model.config.pad_token_id}
            source_at = [i for i, token in enumerate(source_ids) if token not in special]
            target_at = [j for j, token in enumerate(output[1:].tolist()) if token not in special]
            links = [(target_at[j], source_at[i]) for i, j, _ in found.links]
        weights = outputs.cross_attentions[layer][0].float().cpu()  # heads x target x source
        if alignment is not None and not per_head:
            weights = weights[:heads]
        source = token_labels(tokenizer, inputs["input_ids"][0].tolist())
        target = token_labels(tokenizer, output[1:].tolist())
        panels = (
            [(f"head {h + 1}", weights[h]) for h in range(weights.shape[0])]
            if per_head
            else [("mean of heads", weights.mean(0))]
        )
        columns = min(len(panels), 4)
        rows = -(-len(panels) // columns)
        scale = 0.35
        figure, axes = plt.subplots(
            rows,
            columns,
            squeeze=False,
            figsize=(max(4, columns * (2 + scale * len(source))), max(3, rows * (1.5 + scale * len(target)))),
        )
        for axis, (title, matrix) in zip(axes.flat, panels):
            axis.imshow(matrix.numpy(), cmap="viridis", aspect="auto", vmin=0)
            axis.set_xticks(range(len(source)), source, rotation=90, fontsize=8)
            axis.set_yticks(range(len(target)), target, fontsize=8)
            axis.set_title(title, fontsize=9)
            for row, column in links:
                axis.add_patch(plt.Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="red", lw=1.5))
        for axis in list(axes.flat)[len(panels) :]:
            axis.axis("off")
        which = "the last decoder layer" if alignment is None else f"decoder layer {layer} (from 0), alignment in red"
        figure.suptitle(f"cross-attention of {which}", fontsize=10)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)
        return tokenizer.decode(output, skip_special_tokens=True).strip()


@torch.inference_mode()
def token_log_probs(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """(rows, target length) float64 log-probabilities of the labels' tokens (0 where labels are -100): one
    teacher-forced forward pass of a padded batch."""
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    exact = torch.promote_types(logits.dtype, torch.float32)  # float32, or float64 for a float64 model
    log_probs = F.log_softmax(logits.to(exact), dim=-1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    return log_probs.double().masked_fill(labels == -100, 0.0)


def produced(row: list[int], config) -> list[int]:
    """The tokens a search produced in one row of `sequences`: after the start token, up to eos (kept)."""
    tokens = row[1:]
    return tokens[: tokens.index(config.eos_token_id) + 1] if config.eos_token_id in tokens else tokens


def prefix_inputs(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prefixes: list[str]) -> dict:
    """decoder_input_ids (the start token, then each prefix's tokens without eos, right-padded) and their mask."""
    start, pad = model.config.decoder_start_token_id, model.config.pad_token_id
    rows = [[start, *tokenizer(text_target=p, add_special_tokens=False)["input_ids"]] if p.strip() else [start]
            for p in prefixes]  # fmt: skip
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    return {"decoder_input_ids": ids.to(model.device), "decoder_attention_mask": mask.to(model.device)}


def token_labels(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> list[str]:
    """Readable token strings: SentencePiece's pieces as they are; byte-level BPE pieces decoded one by one (a
    leading space shown as '▁')."""
    pieces = tokenizer.convert_ids_to_tokens(ids)
    if any(piece.startswith("▁") for piece in pieces):  # an imported SentencePiece tokenizer decodes no lone "▁"
        return pieces
    return [tokenizer.decode([i]).replace(" ", "▁") or piece for i, piece in zip(ids, pieces)]


def check_same_tokenizer(tokenizers: list, names: list[str]) -> None:
    """An ensemble's models must share their tokenizer: ValueError naming the first difference."""
    first = tokenizers[0]
    vocab = first.get_vocab()
    for tokenizer, name in zip(tokenizers[1:], names[1:]):
        other = tokenizer.get_vocab()
        if other != vocab:
            token = min(set(vocab.items()) ^ set(other.items()), key=lambda item: (item[1], item[0]))[0]
            raise ValueError(
                f"--model {name} has another tokenizer than --model {names[0]}: token {token!r} is "
                f"{other.get(token)} there and {vocab.get(token)} here (an ensemble shares one vocabulary)"
            )
        for special in ("pad_token", "eos_token", "bos_token", "unk_token"):
            mine, theirs = getattr(first, special), getattr(tokenizer, special)
            if theirs != mine:
                raise ValueError(
                    f"--model {name} has {special}={theirs!r}, --model {names[0]} {mine!r}: an ensemble shares one"
                )
