"""The `aayn train` run's plan: every decision made from the recipe and flags before any model or data is
touched (`plan_run`), which the run's steps read and never change."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from transformers import Seq2SeqTrainingArguments
from transformers.utils import logging

from ..checks import available_cores
from ..data.multilingual import temperature_probabilities
from ..data.prepare import DataPlan
from ..languages import pair_limits, pair_name, parse_lang_pairs
from ..model.configuration_aayn import AaynConfig
from ..model.policy_aayn import TOKENIZER_TYPE
from .arguments import DataTrainingArguments, ModelArguments
from .fsdp import accelerate_fsdp_settings
from .output import resume_checkpoint

logger = logging.get_logger("aayn.training")


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """The run's settings, decided once before any work by `plan_run` from its arguments (which it leaves as they
    are); the job's steps read the plan and change none of it."""

    model_args: ModelArguments
    data_args: DataTrainingArguments
    args: Seq2SeqTrainingArguments  # the Trainer's: a copy of the run's arguments with the settings below applied
    data: DataPlan  # what decides the prepared data (`aayn.data.prepare`)
    resume: str | None  # the checkpoint the run resumes from
    average_last: int  # how many of the last checkpoints the final weights average (0: none)
    label_smoothing: float  # §5.4's, which the model takes itself (the Trainer's own smoother is off)
    generation: dict  # the model's generation config for evaluation, testing and the saved folder
    config: AaynConfig | None  # a new model's (the tokenizer's size and ids fill in); None: fine-tuning
    max_tokens: int | None  # the token budget of a batch per device (None: sentences per device)
    length_buckets: list[int] | None  # the lengths max_tokens batches are cut by and padded to (None: their longest)
    bf16_weights: bool  # bf16 weights with float32 master weights instead of autocast (`training.master_weights`)
    early_stopping: tuple[int, float] | None  # (patience, threshold) of the stop on the best metric
    card: dict  # the model card's languages, dataset, license and repository name
    examples_to_print: int  # test translations printed at the end
    num_proc: int  # processes that tokenize the data
    lang_pairs: list[tuple[str, str]] | None = None  # several pairs in one model (`aayn.data.multilingual`)
    pair_limits: dict | None = None  # {pair: its training pairs at most} where `lang_pairs` cuts one (`en-pt:2000`)
    sampling_temperature: float = 1.5  # their mixture in training
    source_lang_token: bool = False  # the source's __xx__ after the target's token (`aayn.data.multilingual`)
    bpe_dropout: float = 0.0  # the training split's segmentations drawn anew each epoch (`aayn.data.subwords`)
    sentencepiece_sampling: tuple[float, int] | None = None  # (alpha, nbest), the same for a SentencePiece unigram


def plan_run(model_args: ModelArguments, data_args: DataTrainingArguments, args) -> RunPlan:
    """Every check that needs no model and no data, and the settings they lead to (ValueError: one line): a new
    model's config is built here, once, so that a bad shape stops the run before any work."""
    check_early_stopping(args, data_args)
    lang_pairs = parse_lang_pairs(data_args.lang_pairs) if data_args.lang_pairs else None
    if lang_pairs is not None:
        temperature_probabilities([1], data_args.sampling_temperature)  # a bad temperature stops here
    if data_args.source_lang_token and lang_pairs is None:
        raise ValueError("source_lang_token puts the source language's token beside the target's: give lang_pairs")
    config = None if model_args.model_name_or_path else model_config(model_args)
    average_last = averaged_checkpoints(args, data_args)
    if args.load_best_model_at_end and average_last:
        raise ValueError(
            "load_best_model_at_end and average_last_checkpoints both choose the final weights: set one of them"
        )
    if model_args.bf16_weights and (args.fsdp or args.deepspeed or accelerate_fsdp_settings()):
        raise ValueError("bf16_weights casts the whole model in one process; FSDP's and DeepSpeed's own mixed "
                         "precision keep float32 master weights of sharded models: drop bf16_weights")  # fmt: skip
    trainer_args = copy.copy(args)
    # the model takes §5.4's loss itself, normalized over the whole accumulated batch; the Trainer's smoother would
    # divide by each micro-batch's tokens instead
    trainer_args.label_smoothing_factor = 0.0
    if not args.predict_with_generate:
        # without generation nothing uses the predictions; the Trainer would gather the full-vocabulary logits of
        # every evaluated sentence (the test split of a base model: tens of GB) to hand them to no metric
        trainer_args.prediction_loss_only = True
    if args.ddp_find_unused_parameters is None:
        trainer_args.ddp_find_unused_parameters = False  # every parameter takes part in every step
    if data_args.num_beams:
        trainer_args.generation_num_beams = data_args.num_beams
    generation = {"num_beams": trainer_args.generation_num_beams, "max_length": args.generation_max_length}
    if data_args.length_penalty is not None:
        generation["length_penalty"] = data_args.length_penalty
    return RunPlan(
        model_args=model_args,
        data_args=data_args,
        args=trainer_args,
        data=data_plan(model_args, data_args, args),
        resume=resume_checkpoint(args.resume_from_checkpoint, args.output_dir),
        average_last=average_last,
        label_smoothing=args.label_smoothing_factor,
        generation={key: value for key, value in generation.items() if value is not None},
        config=config,
        max_tokens=data_args.max_tokens,
        length_buckets=data_args.length_buckets,
        bf16_weights=model_args.bf16_weights,
        early_stopping=(
            None
            if data_args.early_stopping_patience is None
            else (data_args.early_stopping_patience, data_args.early_stopping_threshold)
        ),
        card=dict(
            source_lang=data_args.source_lang,
            target_lang=data_args.target_lang,
            dataset=data_args.dataset_name,
            license=data_args.license,
            lang_pairs=[pair_name(pair) for pair in lang_pairs] if lang_pairs else None,
            repo_id=args.hub_model_id or Path(args.output_dir).name,
        ),
        examples_to_print=data_args.num_examples_to_print,
        num_proc=data_args.preprocessing_num_workers or available_cores(),
        lang_pairs=lang_pairs,
        pair_limits=pair_limits(data_args.lang_pairs) if lang_pairs else None,
        sampling_temperature=data_args.sampling_temperature,
        source_lang_token=data_args.source_lang_token,
        bpe_dropout=bpe_dropout(model_args, data_args),
        sentencepiece_sampling=sentencepiece_sampling(model_args, data_args),
    )


def bpe_dropout(model_args: ModelArguments, data_args: DataTrainingArguments) -> float:
    """The run's BPE-dropout, checked: a chance, on a byte-level BPE."""
    p = data_args.bpe_dropout
    if not 0 <= p < 1:
        raise ValueError(f"bpe_dropout must be in [0, 1) (the chance a merge is left out), got {p}")
    if p and model_args.tokenizer_type != TOKENIZER_TYPE and not model_args.tokenizer_name:
        raise ValueError(
            f"bpe_dropout redraws a byte-level BPE's segmentation; tokenizer_type {model_args.tokenizer_type} has "
            "none (sentencepiece_alpha samples a SentencePiece model's)"
        )
    if p:
        redraws_need_token_batches("bpe_dropout", data_args)
    return p


def redraws_need_token_batches(name: str, data_args: DataTrainingArguments) -> None:
    """A segmentation drawn anew each epoch reads the epoch from the token-batch loader (`SharedEpoch`), which
    hands it to the draws in every run; the Trainer's sentence batches hand it to the dataset in some runs only
    (one process, not resumed)."""
    if data_args.max_tokens is None:
        raise ValueError(f"{name} draws each epoch's segmentation through max_tokens batches: give max_tokens "
                         "(the paper's batching) rather than per_device_train_batch_size")  # fmt: skip


def sentencepiece_sampling(model_args: ModelArguments, data_args: DataTrainingArguments) -> tuple[float, int] | None:
    """The run's SentencePiece sampling (alpha, nbest), checked; None where it is off."""
    alpha, nbest = data_args.sentencepiece_alpha, data_args.sentencepiece_nbest
    if alpha == 0:
        return None
    if not (alpha > 0 and (nbest == -1 or nbest > 1)):
        raise ValueError(f"sentencepiece_alpha must be > 0 and sentencepiece_nbest -1 (every segmentation) or > 1; "
                         f"got {alpha} and {nbest}")  # fmt: skip
    if data_args.bpe_dropout:
        raise ValueError("bpe_dropout and sentencepiece_alpha each redraw the segmentation: give one")
    if model_args.tokenizer_type == TOKENIZER_TYPE and not model_args.tokenizer_name:
        raise ValueError("sentencepiece_alpha samples a SentencePiece unigram model's segmentations; this run trains "
                         "a byte-level BPE (tokenizer_type: sentencepiece)")  # fmt: skip
    if model_args.sentencepiece_model_type != "unigram" and not model_args.tokenizer_name:
        raise ValueError(
            "sentencepiece_alpha samples a unigram model's segmentations; sentencepiece_model_type is "
            f"{model_args.sentencepiece_model_type} (BPE-dropout is offered for the byte-level BPE)"
        )
    redraws_need_token_batches("sentencepiece_alpha", data_args)
    return alpha, nbest


def data_plan(model_args: ModelArguments, data_args: DataTrainingArguments, args) -> DataPlan:
    """What decides the run's prepared data (`aayn.data.prepare`), from its arguments."""
    return DataPlan(
        data_args.dataset_name,
        data_args.source_lang,
        data_args.target_lang,
        dataset_config_name=data_args.dataset_config_name,
        splits=needed_splits(data_args, args),
        max_samples={
            "train": data_args.max_train_samples,
            "validation": data_args.max_eval_samples,
            "test": data_args.max_predict_samples,
        },
        max_source_length=data_args.max_source_length,
        max_target_length=data_args.max_target_length,
        overlong=data_args.overlong,
        vocab_size=model_args.vocab_size,
        tokenizer_type=model_args.tokenizer_type,
        sentencepiece_model_type=model_args.sentencepiece_model_type,
        input_sentence_size=data_args.input_sentence_size,
        tokenizer_name=model_args.tokenizer_name,
    )


def needed_splits(data_args: DataTrainingArguments, args: Seq2SeqTrainingArguments) -> dict[str, str]:
    """The splits the run's stages read (do_train, do_eval: evaluations during training, do_predict: the test)."""
    wanted = {"train": args.do_train, "validation": args.do_train and args.do_eval, "test": args.do_predict}
    given = {"train": data_args.train_split, "validation": data_args.validation_split, "test": data_args.test_split}
    return {split: spec for split, spec in given.items() if wanted[split]}


def saved_checkpoints(args: Seq2SeqTrainingArguments) -> int | None:
    """How many checkpoints the run will have written by its end, where the arguments tell (None: unknown)."""
    if args.save_strategy == "no":
        return 0
    if args.save_strategy != "steps" or args.max_steps <= 0 or args.save_steps < 1:
        return None
    steps = int(args.save_steps)
    count = args.max_steps // steps + (args.max_steps % steps > 0)  # the Trainer also saves at the last step
    return min(count, args.save_total_limit) if args.save_total_limit else count


def averaged_checkpoints(args: Seq2SeqTrainingArguments, data_args: DataTrainingArguments) -> int:
    """How many of the last checkpoints the final weights average (0: none). A run shortened below the recipe's
    averaging (`--max_steps 100` with save_steps 300) averages the checkpoints it will leave, said in one line,
    instead of refusing; a run that does not train averages nothing (the model is tested as given)."""
    wanted, count = data_args.average_last_checkpoints, saved_checkpoints(args)
    if not args.do_train:
        return 0
    if wanted and count is not None and count < wanted:
        strategy = getattr(args.save_strategy, "value", args.save_strategy)
        logger.warning(
            f"average_last_checkpoints={wanted}, but save_strategy={strategy}, save_steps={args.save_steps}, "
            f"max_steps={args.max_steps} and save_total_limit={args.save_total_limit} leave {count} checkpoint(s): "
            + (f"averaging those {count}" if count > 1 else "no averaging")
        )
        return count if count > 1 else 0
    return wanted


def check_early_stopping(args: Seq2SeqTrainingArguments, data_args: DataTrainingArguments) -> None:
    """Keep-the-best and early-stopping keys that go together, checked before any work."""
    metric = (args.metric_for_best_model or "").removeprefix("eval_")
    if metric in ("bleu", "chrf") and not args.predict_with_generate:
        raise ValueError(
            f"metric_for_best_model={metric} needs predict_with_generate: true (BLEU and chrF score translations)"
        )
    if data_args.early_stopping_patience is not None:
        if args.eval_strategy == "no":
            raise ValueError("early_stopping_patience needs evaluations: set eval_strategy (steps or epoch)")
        if not args.metric_for_best_model:
            raise ValueError("early_stopping_patience needs metric_for_best_model (e.g. bleu)")


def model_config(model_args: ModelArguments) -> AaynConfig:
    """A new model's config from the recipe's shape, with its vocabulary size and aayn's special ids (a tokenizer
    given or trained later fills in its own): every value checked before any work is spent."""
    config = AaynConfig(
        vocab_size=model_args.vocab_size,
        d_model=model_args.d_model,
        encoder_layers=model_args.encoder_layers,
        decoder_layers=model_args.decoder_layers,
        encoder_attention_heads=model_args.attention_heads,
        decoder_attention_heads=model_args.attention_heads,
        encoder_ffn_dim=model_args.ffn_dim,
        decoder_ffn_dim=model_args.ffn_dim,
        dropout=model_args.dropout,
        attention_dropout=model_args.attention_dropout,
        activation_dropout=model_args.activation_dropout,
        init_std=model_args.init_std,
        norm_first=model_args.norm_first,
        max_position_embeddings=model_args.max_position_embeddings,
    )
    config._attn_implementation = model_args.attn_implementation
    return config


def distilled_from(dataset: str) -> list[str]:
    """The card's words for a corpus `aayn distill` wrote: its teachers, their search and their stated scores."""
    report = Path(dataset) / "report.json"
    try:
        report = json.loads(report.read_text(encoding="utf-8")) if report.is_file() else {}
    except ValueError:
        return []
    if not isinstance(report, dict) or report.get("written_by") != "aayn distill":
        return []
    teachers = []
    for name, scores in zip(report["teachers"], report["teacher_results"]):
        stated = ", ".join(f"{metric.upper()} {value:.2f}" for metric, value in sorted((scores or {}).items()))
        teachers.append(f"`{name}`" + (f" (its card's test {stated})" if stated else ""))
    search = report["search"] if isinstance(report["search"], str) else json.dumps(report["search"])
    references = ", the references after them" if report.get("with_references") else ""
    who = " and ".join(teachers) + (" (an ensemble)" if len(teachers) > 1 else "")
    pairs = f"{report['distilled_pairs']:,} training pairs"
    said = (f"Sequence-level distillation (Kim & Rush 2016): the targets of the {pairs} are {who}'s translations of "
            f"their sources (search: {search}){references}.")  # fmt: skip
    return [said]


def training_summary(plan: RunPlan, seconds: float | None = None) -> str:
    model_args, card, args = plan.model_args, plan.card, plan.args
    shape = (
        "fine-tuned from " + model_args.model_name_or_path if model_args.model_name_or_path else "trained from scratch"
    )
    batch = (
        f"batches of at most {plan.max_tokens} padded tokens per device"
        + (f", cut and padded by length buckets {plan.length_buckets}" if plan.length_buckets else "")
        if plan.max_tokens
        else f"{args.per_device_train_batch_size} sentence pairs per device"
    )
    direction = f"{card['source_lang']} to {card['target_lang']}"
    if plan.lang_pairs:
        direction = f"the pairs {', '.join(card['lang_pairs'])}, mixed at temperature {plan.sampling_temperature:g}"
        direction += ", each source led by its target's and its own language's token" * plan.source_lang_token
    lines = [
        f"{shape} with `aayn train` on `{card['dataset']}` ({direction}):",
        (
            f"{args.max_steps if args.max_steps > 0 else args.num_train_epochs} "
            f"{'steps' if args.max_steps > 0 else 'epochs'}, "
            f"{batch} x {args.gradient_accumulation_steps} accumulation x {args.world_size} processes, "
            f"Adam (beta2 {args.adam_beta2}, eps {args.adam_epsilon}), learning rate {args.learning_rate:g} with "
            f"{getattr(args.lr_scheduler_type, 'value', args.lr_scheduler_type)} schedule and {args.warmup_steps:g} "
            f"warmup steps, label smoothing {plan.label_smoothing}."
        ),
    ]
    if plan.bpe_dropout:
        lines.append(f"BPE-dropout {plan.bpe_dropout:g}: a new segmentation of each training sentence each epoch.")
    if plan.sentencepiece_sampling:
        alpha, nbest = plan.sentencepiece_sampling
        among = "every segmentation" if nbest == -1 else f"the {nbest} best"
        lines.append(f"SentencePiece sampling (alpha {alpha:g}, among {among}): a new segmentation of each training "
                     "sentence each epoch.")  # fmt: skip
    lines.extend(distilled_from(card["dataset"]))
    if plan.average_last:
        lines.append(f"The weights are the average of the last {plan.average_last} checkpoints.")
    if seconds is not None:
        lines.append(f"Training took {seconds / 60:.1f} minutes.")
    return " ".join(lines)
