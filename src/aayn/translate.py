"""Saved aayn models as a `Translator`: many sentences fast (batched by tokens, sorted by length) with the paper's
search, target prefixes, ensembles, and drawing cross-attention."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .data.token_batches import decoding_batches, encode_sources, padded
from .policy_aayn import beams_for, source_limit
from .translator import ABILITIES, DECODING_BATCH_TOKENS, Translator, progress_bar


class TorchTranslator(Translator):
    """Saved aayn models (one, or an ensemble sharing its tokenizer) on a torch device: the paper's search
    (`generate`, `generate_ensemble`), with target prefixes; one model also scores pairs (`aayn.scoring`) and draws
    attention."""

    def __init__(self, models: list[PreTrainedModel], tokenizer: PreTrainedTokenizerBase):
        self.models, self.tokenizer = list(models), tokenizer
        self.model = self.models[0]
        self.abilities = frozenset(ABILITIES if len(self.models) == 1 else ("prefixes",))

    @torch.inference_mode()
    def nbest(
        self,
        texts: list[str],
        nbest: int = 1,
        *,
        batch_tokens: int = DECODING_BATCH_TOKENS,
        max_source_length: int | None = None,
        prefixes: list[str] | None = None,
        progress: str | None = None,
        **generate,
    ) -> list[list[tuple[float, str]]]:
        """Per input, in input order, the `nbest` best hypotheses as (score, text), ranked as the search ranks them
        (the paper's search: log P / GNMT's lp; at least `nbest` beams). Sentences of similar length are batched
        up to `batch_tokens` padded source tokens (the training batch sampler, unshuffled). An empty or blank line
        gives one empty hypothesis with score 0. `prefixes` (one per input, "" for none) are target prefixes each
        translation continues from (included in the text and the score). `progress`: a description for a progress
        bar over the sentences on stderr, shown once the work has taken a second."""
        model, tokenizer = self.model, self.tokenizer
        if len(self.models) > 1:
            from .generation_aayn import generate_ensemble

            def decode(**inputs):
                return generate_ensemble(self.models, **inputs)
        else:
            decode = model.generate
        if prefixes is not None and len(prefixes) != len(texts):
            message = f"{len(prefixes)} prefixes for {len(texts)} inputs: one prefix (or an empty line) per input"
            raise ValueError(message)
        limit = max_source_length or source_limit(tokenizer.model_max_length, model.config.max_position_embeddings)
        outputs: list[list[tuple[float, str]]] = [[(0.0, "")] for _ in texts]
        todo, encoded = encode_sources(lambda rows: tokenizer(rows, verbose=False)["input_ids"], texts, limit)
        if not todo:
            return outputs
        if nbest > 1:
            beams = beams_for(generate.get("num_beams") or model.generation_config.num_beams, nbest)
            generate = {**generate, "num_beams": beams, "num_return_sequences": nbest}
        bar = progress_bar(len(todo), progress)
        for batch in decoding_batches([len(ids) for ids in encoded], batch_tokens):
            inputs = padded(tokenizer, [encoded[j] for j in batch]).to(model.device)
            if prefixes is not None:
                inputs.update(prefix_inputs(model, tokenizer, [prefixes[todo[j]] for j in batch]))
            out = decode(**inputs, **generate, return_dict_in_generate=True)
            texts_out = [text.strip() for text in tokenizer.batch_decode(out.sequences, skip_special_tokens=True)]
            scores = out.sequences_scores.tolist() if getattr(out, "sequences_scores", None) is not None else None
            for row, j in enumerate(batch):
                rows = range(row * nbest, (row + 1) * nbest)
                outputs[todo[j]] = [(scores[r] if scores else math.nan, texts_out[r]) for r in rows]
            if bar is not None:
                bar.update(len(batch))
        if bar is not None:
            bar.close()
        return outputs

    @torch.inference_mode()
    def plot_cross_attention(
        self,
        text: str,
        path: str | Path,
        *,
        per_head: bool = False,
        **generate,
    ) -> str:
        """Translate `text`, then draw the last decoder layer's cross-attention (target rows, source columns) to a PNG,
        averaged over heads or one panel per head. Returns the translation (one model only)."""
        model, tokenizer = self.model, self.tokenizer
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        inputs = tokenizer([text], return_tensors="pt").to(model.device)
        output = model.generate(**inputs, **generate)[0]
        outputs = model(**inputs, decoder_input_ids=output[None, :-1], output_attentions=True)
        weights = outputs.cross_attentions[-1][0].float().cpu()  # heads x target x source
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
        for axis in list(axes.flat)[len(panels) :]:
            axis.axis("off")
        figure.suptitle("cross-attention of the last decoder layer", fontsize=10)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)
        return tokenizer.decode(output, skip_special_tokens=True).strip()


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
    """Readable token strings (byte-level BPE pieces decoded one by one; a leading space shown as '▁')."""
    return [tokenizer.decode([i]).replace(" ", "▁") or tokenizer.convert_ids_to_tokens(i) for i in ids]


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
