"""`Seq2SeqTrainer` with what it lacks for the paper's recipe: token-budget batches and a stop on divergence."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import unittest.mock
from pathlib import Path

import evaluate
import numpy as np
import torch
from datasets import IterableDataset
from torch.utils.data import DataLoader
from transformers import IntervalStrategy, PreTrainedTokenizerBase, Seq2SeqTrainer, TrainerCallback
from transformers.utils import logging

from ..cards import write_model_card
from ..data.batching import BucketPadding, MaxTokensBatchSampler, SharedEpoch, example_lengths
from ..metrics import METRICS_MODULE
from .arguments import MIXED_PRECISION, environment_unchanged
from .fsdp import shard_for_trainer
from .master_weights import MasterWeights

logger = logging.get_logger(__name__)


class TrainingDiverged(FloatingPointError):
    """The loss became NaN or infinite: stop rather than save a broken model."""


def credential_fields(args) -> list[str]:
    """The arguments that hold a Hub token: `hub_token`, and 4.57's deprecated `push_to_hub_token`."""
    return [f.name for f in dataclasses.fields(args) if f.name.endswith("_token")]


def keep_credentials_off_disk(args) -> None:
    """The Trainer pickles its arguments into training_args.bin of every checkpoint, the final folder and the
    pushes; huggingface_hub reads the token from the environment instead, which nothing writes out."""
    for name in credential_fields(args):
        token = getattr(args, name)
        if token:
            os.environ["HF_TOKEN"] = token
        setattr(args, name, None)


def no_waits_for_the_device(args) -> None:
    """What the Trainer's step would otherwise make the host wait for on an accelerator, turned off: its filter of
    NaN/inf losses out of the log (a host read at every step; AaynTrainer stops on such a loss instead, see
    `training_step`), and copies of batches from pinned memory that wait for the copy (`non_blocking`)."""
    args.logging_nan_inf_filter = False
    if args.dataloader_pin_memory and args.accelerator_config is not None:
        args.accelerator_config.non_blocking = True


@contextlib.contextmanager
def precision_of(args):
    """A block in which the environment says the precision `args` ask for, where 4.57's Trainer builds its
    Accelerator (which reads it there: 5.x passes `args.mixed_precision` itself); as before after it. Arguments
    asking for neither leave the launcher's choice (`accelerate launch --mixed_precision`)."""
    with environment_unchanged():
        if args.fp16 or args.bf16:
            os.environ[MIXED_PRECISION] = "fp16" if args.fp16 else "bf16"
        yield


class StopIfDiverged(TrainerCallback):
    """Before a log, an evaluation or a checkpoint, stop if the loss diverged, so that nothing diverged is saved (a
    log reads the loss from the device anyway). The Trainer's own flow callback runs first and has set what this
    step (or epoch) will do by the time this one is called."""

    def __init__(self, trainer: AaynTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_log or control.should_evaluate or control.should_save:
            self.trainer._stop_if_diverged()

    on_epoch_end = on_step_end


class AaynTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer + `max_tokens` batching (fairseq's --max-tokens) + an error on a NaN/inf loss + bf16 weights
    with float32 master weights (`bf16_weights`, fairseq's --bf16: `master_weights.py`).

    With `max_tokens`, training batches come from `MaxTokensBatchSampler` over the whole training set; Accelerate
    deals them round-robin to the processes (the sampler makes their number a multiple of the world size, so each
    process gets a disjoint, equal share and none is repeated) and forwards `set_epoch` to the loader's dataset,
    `SharedEpoch`, which sets the sampler's shuffle and the dataset's subword draws alike.
    """

    def __init__(
        self,
        *args,
        max_tokens: int | None = None,
        length_buckets: list[int] | None = None,
        model_card: dict | None = None,
        bf16_weights: bool = False,
        **kwargs,
    ):
        training_args = kwargs.get("args") if "args" in kwargs else (args[1] if len(args) > 1 else None)
        if training_args is not None:
            keep_credentials_off_disk(training_args)
            no_waits_for_the_device(training_args)
        train_dataset = kwargs.get("train_dataset")
        if max_tokens is not None and isinstance(train_dataset, IterableDataset):
            raise ValueError(
                "max_tokens batches a corpus sorted by length, which a streamed dataset cannot be; prepare the data "
                "instead (`aayn preprocess`, or load it without streaming=True), or give per_device_train_batch_size"
            )
        with precision_of(training_args) if training_args is not None else contextlib.nullcontext():
            super().__init__(*args, **kwargs)
        self.max_tokens, self.length_buckets = max_tokens, length_buckets
        self.model_card = model_card  # render_model_card arguments; every saved folder gets its README.md
        self.results: dict | None = None  # test scores for the card, once known; until then the last validation
        self._train_lengths = None
        self._diverged: tuple[torch.Tensor, torch.Tensor] | None = None  # (first non-finite loss's step, the loss)
        self._parameters_counted = None  # (model, parameters outside the embeddings), for `floating_point_ops`
        if bf16_weights and self.optimizer is not None:
            raise ValueError("bf16_weights points the Trainer's own optimizer at float32 master weights; an optimizer "
                             "given in `optimizers` would update the bf16 weights: give one or the other")  # fmt: skip
        self.bf16_weights = bf16_weights
        self.master_weights: MasterWeights | None = None  # while a bf16_weights training runs
        self.add_callback(StopIfDiverged(self))

    def train(self, *args, **kwargs):
        """Under Accelerate's FSDP2 plugin the model is sharded first by aayn's wrapping (`training.fsdp.shard`: §3.4's
        matrix in one unit), which Accelerate then keeps; so too before an evaluation or a prediction alone."""
        shard_for_trainer(self)
        try:
            output = super().train(*args, **kwargs)
        finally:
            if self.master_weights is not None:  # the model float32 again, holding the master weights
                self.master_weights.release()
                # a later train() casts and attaches anew, with a schedule over its new optimizer
                self.master_weights = self.optimizer = self.lr_scheduler = None
        self._stop_if_diverged()  # steps after the last log: before the caller saves the model
        return output

    def create_optimizer(self, *args):  # 5.x passes the model to build it over; 4.57 nothing
        """With `bf16_weights`, the Trainer's own optimizer (its class, groups, settings), built over the float32
        model (loaded from the checkpoint where the run resumes: the masters are the saved ones, exactly) before
        Accelerate wraps it, then the model cast to bf16 and the optimizer pointed at the float32 masters."""
        if not self.bf16_weights or self.optimizer is not None:
            return super().create_optimizer(*args)
        optimizer = super().create_optimizer(*args)
        self.master_weights = MasterWeights(self.model)
        self.optimizer = self.master_weights.attach(optimizer)
        return self.optimizer

    def evaluate(self, *args, **kwargs):
        shard_for_trainer(self)
        return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        shard_for_trainer(self)
        return super().predict(*args, **kwargs)

    def _load_best_model(self) -> None:
        """`load_best_model_at_end` at the end of `train()`: with bf16 weights, the best checkpoint's float32 weights
        into the master weights, which the model holds from then on (loaded into the bf16 model, they would be
        rounded, then replaced by the last step's masters). Private: no callback runs between the choice of the best
        checkpoint and its load (`on_train_end` comes after), and no public method loads it."""
        with self._float32_weights():
            super()._load_best_model()

    def _load_optimizer_and_scheduler(self, checkpoint) -> None:
        """A resumed run's optimizer state. transformers 4.57 loads that of a run of several processes onto
        `args.device`, which Accelerate makes `cpu:0` on a CPU, a location torch.load refuses ("don't know how to
        restore data location"): loaded onto the CPU here, the device it means (5.x loads onto the CPU itself).
        Private: the Trainer loads the state there and nowhere a callback reaches before the first step."""
        device = self.args.device
        if checkpoint is None or device.type != "cpu" or device.index is None:
            return super()._load_optimizer_and_scheduler(checkpoint)
        load = torch.load

        def onto_the_cpu(*args, **kwargs):
            return load(*args, **{**kwargs, "map_location": "cpu"})

        with unittest.mock.patch.object(torch, "load", onto_the_cpu):
            return super()._load_optimizer_and_scheduler(checkpoint)

    def _float32_weights(self):
        """A block in which the model holds float32 weights: with bf16 weights, their masters; else as it is."""
        return self.master_weights.float32() if self.master_weights is not None else contextlib.nullcontext()

    def _save(self, output_dir: str | None = None, state_dict=None):
        """The Trainer's folder (weights, config), with the rest of an aayn folder written as every aayn folder is
        (`aayn.formats.aayn`): a tokenizer that loads on both transformers lines, and aayn's card. Private: every
        save ends here (`save_model`'s branches for FSDP, DeepSpeed and the rest, each checkpoint), while `on_save`
        fires only for checkpoints, after the Trainer wrote them, and `save_model` called directly fires nothing."""
        from ..formats.aayn import AaynFolder, SavedModel

        output_dir = output_dir or self.args.output_dir
        # a checkpoint of a bf16_weights run holds (and its config says) the float32 master weights
        with self._float32_weights():
            super()._save(output_dir, state_dict)
            if not self.args.should_save:  # transformers 5 calls `_save` on every process; one writes
                return
            tokenizer = self.processing_class if hasattr(self.processing_class, "backend_tokenizer") else None
            saved = SavedModel(self.accelerator.unwrap_model(self.model), tokenizer, self.card_keywords())
            AaynFolder.write_into(Path(output_dir), saved, weights=False)

    def create_model_card(self, *args, **kwargs) -> None:
        """`push_to_hub` calls this after saving: it would replace aayn's card with transformers' generic one."""
        if not self.model_card:
            super().create_model_card(*args, **kwargs)
        elif self.is_world_process_zero():
            self._write_model_card(self.args.output_dir)

    def card_keywords(self) -> dict | None:
        """The card's `write_model_card` keywords with the scores known so far (test, else the last validation's);
        None where the run writes no card."""
        if not self.model_card:
            return None
        evaluations = [entry for entry in self.state.log_history if "eval_bleu" in entry]
        results = self.results or (
            {"bleu": evaluations[-1]["eval_bleu"], "chrf": evaluations[-1]["eval_chrf"]} if evaluations else None
        )
        return {**self.model_card, "results": results}

    def _write_model_card(self, output_dir: str) -> None:
        if self.model_card:
            write_model_card(output_dir, self.accelerator.unwrap_model(self.model), **self.card_keywords())

    def get_train_dataloader(self) -> DataLoader:
        if self.max_tokens is None:
            return super().get_train_dataloader()
        if self._train_lengths is None:
            self._train_lengths = example_lengths(getattr(self.train_dataset, "prepared", self.train_dataset))
        sampler = MaxTokensBatchSampler(
            self._train_lengths, self.max_tokens, seed=self.args.seed, num_replicas=self.args.world_size, rank=None,
            buckets=self.length_buckets,
        )  # fmt: skip
        collate = self.data_collator
        if self.length_buckets:
            collate = BucketPadding(collate, self.length_buckets, self.processing_class.pad_token_id)
        loader = DataLoader(
            SharedEpoch(self.train_dataset, sampler),
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory and torch.cuda.is_available(),
        )
        return self.accelerator.prepare(loader)

    def _get_grad_norm(self, model, grad_norm=None):
        """transformers 5.x computes the gradients' norm at every step for its log, even with clipping off (the
        paper's `max_grad_norm: 0`), a pass over every gradient. Only a logging step's norm is ever read
        (`grad_norm` in the log is that step's), so with `logging_strategy: steps` the others skip it. A callback
        that asks for a log at other steps gets it without `grad_norm`. (4.57 computes no norm without clipping.)
        Private: the loop calls it between the backward and the optimizer step, where no callback can skip it."""
        step = self.state.global_step + 1  # the step about to end
        logs = step % self.state.logging_steps == 0 or (step == 1 and self.args.logging_first_step)
        if grad_norm is None and self.args.logging_strategy == IntervalStrategy.STEPS and not logs:
            return None
        return super()._get_grad_norm(model, grad_norm)

    def training_step(self, model, inputs, *args, **kwargs):
        """The step's loss, watched for divergence on the device: the first non-finite loss and its step are kept
        in tensors (`_watch_loss`) and read back only where the Trainer reads the device anyway or is about to write
        (`_stop_if_diverged`), so a step makes the host wait for nothing."""
        loss = super().training_step(model, inputs, *args, **kwargs)
        self._watch_loss(loss)
        return loss

    def _watch_loss(self, loss: torch.Tensor) -> None:
        loss = loss.detach()
        if self._diverged is None or self._diverged[0].device != loss.device:
            self._diverged = (torch.full((), -1, device=loss.device), torch.zeros((), device=loss.device))
        first_step, first_loss = self._diverged
        new = ~torch.isfinite(loss) & (first_step < 0)
        self._diverged = (
            torch.where(new, self.state.global_step + 1, first_step),
            torch.where(new, loss.float(), first_loss),
        )

    def _stop_if_diverged(self) -> None:
        """Raise `TrainingDiverged` if a loss so far was NaN or infinite (one host read)."""
        if self._diverged is None:
            return
        first_step, first_loss = self._diverged
        step = int(first_step)
        if step >= 0:
            raise TrainingDiverged(
                f"training diverged: the loss is {first_loss.item()} at step {step}. Nothing was saved after the "
                "last checkpoint. Lower learning_rate, raise warmup_steps, or check the data."
            )

    def floating_point_ops(self, inputs: dict) -> int:
        """transformers' count, 6 x the input tokens x the parameters outside the embeddings, with the parameters
        counted once per model instead of at every micro-batch (~0.4 ms of host time each at the base shape)."""
        model, main = self.model, getattr(self.model, "main_input_name", "input_ids")
        if main not in inputs or not hasattr(model, "num_parameters"):
            return 0
        if self._parameters_counted is None or self._parameters_counted[0] is not model:
            self._parameters_counted = (model, model.num_parameters(exclude_embeddings=True))
        return 6 * inputs[main].numel() * self._parameters_counted[1]


def translation_metrics(tokenizer: PreTrainedTokenizerBase, target_lang: str | None = None,
                        rows: list[str] | None = None):  # fmt: skip
    """`compute_metrics` for `predict_with_generate`: sacreBLEU BLEU and chrF on detokenized text; into German
    also `paper_bleu`, BLEU as the paper computed its EN-DE numbers (`aayn.metrics.paper_bleu`). With `rows`
    (each row's pair, `aayn.data.multilingual`): `bleu_PAIR` and `chrf_PAIR` for each pair, each scored on its
    rows alone, and `bleu` / `chrf` their means, what the best checkpoint and early stopping read; `off_target_PAIR`,
    the share of its outputs not in its target language (`aayn serve`'s detector, where `aayn[detect]` is there)."""
    from ..metrics.paper_bleu import paper_bleu_scores
    from ..translation.targets import off_target_rate

    metric = evaluate.load(METRICS_MODULE)
    languages = sorted({lang for pair in rows or () for lang in pair.split("-")})

    def compute(prediction):
        predictions, labels = prediction.predictions, prediction.label_ids
        predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
        labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
        hypotheses = [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        lengths = [np.count_nonzero(row != tokenizer.pad_token_id) for row in predictions]
        if rows is not None:
            if len(rows) != len(hypotheses):
                raise ValueError(f"{len(hypotheses)} translations scored against {len(rows)} rows' pairs")
            result = {}
            for pair in dict.fromkeys(rows):
                chosen = [i for i, name in enumerate(rows) if name == pair]
                scores = metric.compute(predictions=[hypotheses[i] for i in chosen],
                                        references=[references[i] for i in chosen])  # fmt: skip
                result[f"bleu_{pair}"], result[f"chrf_{pair}"] = scores["bleu"], scores["chrf"]
                off = off_target_rate([hypotheses[i] for i in chosen], pair.split("-")[1], languages)
                result |= {f"off_target_{pair}": off} if off is not None else {}
            pairs = list(dict.fromkeys(rows))
            for name in ("bleu", "chrf"):
                result[name] = float(np.mean([result[f"{name}_{pair}"] for pair in pairs]))
            return result | {"gen_len": float(np.mean(lengths))}
        scores = metric.compute(predictions=hypotheses, references=references)
        result = {"bleu": scores["bleu"], "chrf": scores["chrf"], "gen_len": float(np.mean(lengths))}
        return result | paper_bleu_scores(hypotheses, references, target_lang, signature=False)

    return compute


def plot_history(log_history: list[dict], path: Path) -> None:
    """Training / validation loss and validation BLEU per step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [
        (entry["step"], entry["loss"]) for entry in log_history if "loss" in entry and math.isfinite(entry["loss"])
    ]
    evals = [entry for entry in log_history if "eval_loss" in entry]
    figure, (losses, bleu) = plt.subplots(1, 2, figsize=(11, 4))
    if train:
        losses.plot(*zip(*train), label="training loss")
    if evals:
        losses.plot([e["step"] for e in evals], [e["eval_loss"] for e in evals], "o-", label="validation loss")
    losses.set(xlabel="step", ylabel="loss (label-smoothed cross-entropy)", title="Loss")
    losses.legend()
    with_bleu = [e for e in evals if "eval_bleu" in e]
    if with_bleu:
        bleu.plot([e["step"] for e in with_bleu], [e["eval_bleu"] for e in with_bleu], "o-", color="tab:green")
    bleu.set(xlabel="step", ylabel="BLEU", title="Validation BLEU (sacreBLEU)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
