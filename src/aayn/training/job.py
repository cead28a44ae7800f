"""The `aayn train` job: dataset -> tokenizer -> model -> Seq2SeqTrainer -> BLEU -> a hub-ready folder."""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from pathlib import Path

from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    TrainerState,
    set_seed,
)
from transformers.utils import logging

from ..checks import available_cores, check_direction, check_fits_in_memory, check_model_folder
from ..configuration_aayn import AaynConfig
from ..data import save_tokenizer
from ..data.prepare import DataPlan, PreparedData, prepare_data
from ..folders import write_text_atomically
from ..modeling_aayn import AaynForConditionalGeneration
from ..policy_aayn import UNSET_LENGTH_PENALTY
from .arguments import DataTrainingArguments, ModelArguments
from .average import last_checkpoints, load_average, load_weights
from .output import FINAL_STAGING, claim_output_dir, move_final_files, resume_checkpoint
from .trainer import AaynTrainer, plot_history, translation_metrics

logger = logging.get_logger("aayn.training")


def given_tokenizer(model_args: ModelArguments, args: Seq2SeqTrainingArguments):
    """The tokenizer the run must use, if any: the given one, the fine-tuned model's, or this run's own BPE saved
    before it was resumed (None: a new BPE, from the prepared-data cache or trained there)."""
    source = model_args.tokenizer_name or model_args.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(source)
    folder = Path(args.output_dir) / "tokenizer"
    if (folder / "tokenizer.json").is_file():
        logger.info(f"reusing the tokenizer in {folder}, written by this run before it was resumed")
        return AutoTokenizer.from_pretrained(folder)
    return None


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


def prepare(model_args, data_args, args, plan: DataPlan | None = None) -> PreparedData:
    """The run's tokenizer and tokenized splits, prepared once (the main process first; the others find them)."""
    with args.main_process_first(desc="preparing the data"):
        plan = plan or data_plan(model_args, data_args, args)
        return prepare_data(
            plan,
            list(plan.splits),
            tokenizer=given_tokenizer(model_args, args),
            num_proc=data_args.preprocessing_num_workers or available_cores(),
        )


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


def model_config(model_args: ModelArguments, tokenizer=None) -> AaynConfig:
    """The new model's config; without a tokenizer (not trained yet), with the recipe's vocabulary size and the
    default special ids, which is enough to check every value before any work is spent."""
    special = {}
    if tokenizer is not None:
        special = dict(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.bos_token_id,
        )
    config = AaynConfig(
        **{"vocab_size": model_args.vocab_size, **special},
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


# keys of a new model's shape, as the model's config names them: a trained model has its own
SHAPE_KEYS = {
    "d_model": ("d_model",),
    "encoder_layers": ("encoder_layers",),
    "decoder_layers": ("decoder_layers",),
    "attention_heads": ("encoder_attention_heads", "decoder_attention_heads"),
    "ffn_dim": ("encoder_ffn_dim", "decoder_ffn_dim"),
    "norm_first": ("norm_first",),
    "max_position_embeddings": ("max_position_embeddings",),
    "init_std": ("init_std",),
}
# keys that may change on a trained model: they apply, and land in the saved config
FINE_TUNING_KEYS = ("dropout", "attention_dropout", "activation_dropout")


def fine_tuning_overrides(model_args: ModelArguments, config) -> dict:
    """The config values the recipe or flags change on the model to fine-tune; a shape key that differs from the
    model's own value is refused in one line (a recipe may repeat the model's shape)."""
    given = model_args.given
    if "vocab_size" in given and model_args.vocab_size != getattr(config, "vocab_size", None):
        logger.warning(
            f"vocab_size {model_args.vocab_size} sizes a new model's BPE; the model in {model_args.model_name_or_path} "
            f"keeps its {config.vocab_size}-token vocabulary"
        )
    for key in ("tokenizer_type", "sentencepiece_model_type"):
        if key in given:
            logger.warning(f"{key} chooses a new model's vocabulary; the model keeps its own tokenizer")
    for key, names in SHAPE_KEYS.items():
        value = getattr(model_args, key)
        if key not in given:
            continue
        held = [getattr(config, name, None) for name in names]
        if any(other != value for other in held):
            raise ValueError(
                f"--{key} {value}: the model in {model_args.model_name_or_path} has {key} {held[0]}, and a trained "
                f"model's shape cannot change; drop --{key} to fine-tune it, or train a new model"
            )
    return {key: getattr(model_args, key) for key in FINE_TUNING_KEYS if key in given and hasattr(config, key)}


def load_pretrained(model_args: ModelArguments):
    """The model to fine-tune, read before output_dir is touched; a damaged folder is named file by file. Dropout
    given in the recipe or flags replaces the model's; a shape that differs from the model's is refused."""
    location = model_args.model_name_or_path
    check_model_folder(location, "--model_name_or_path", tokenizer=not model_args.tokenizer_name)
    if model_args.tokenizer_name:
        check_model_folder(model_args.tokenizer_name, "--tokenizer_name", config=False, weights=False)
    try:
        config = AutoConfig.from_pretrained(location)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot load a model from --model_name_or_path {location}: {error}") from None
    if config.model_type != "aayn":  # the run's loss, search and card are aayn's: another model would miss them
        raise ValueError(
            f"--model_name_or_path {location} is a {config.model_type} model; aayn train fine-tunes aayn models"
        )
    overrides = fine_tuning_overrides(model_args, config)
    try:
        return AutoModelForSeq2SeqLM.from_pretrained(
            location, attn_implementation=model_args.attn_implementation, **overrides
        )
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot load a model from --model_name_or_path {location}: {error}") from None


def build_model(model_args: ModelArguments, tokenizer) -> AaynForConditionalGeneration:
    if model_args.model_name_or_path:
        return load_pretrained(model_args)
    return AaynForConditionalGeneration(model_config(model_args, tokenizer))


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


def plan_run(model_args: ModelArguments, data_args: DataTrainingArguments, args) -> RunPlan:
    """Every check that needs no model and no data, and the settings they lead to (ValueError: one line)."""
    check_early_stopping(args, data_args)
    average_last = averaged_checkpoints(args, data_args)
    if args.load_best_model_at_end and average_last:
        raise ValueError(
            "load_best_model_at_end and average_last_checkpoints both choose the final weights: set one of them"
        )
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
    )


def configure_model(model, plan: RunPlan) -> None:
    """The plan's loss and generation settings on the model (they are saved with it)."""
    if model.config.model_type == "aayn":
        model.config.label_smoothing = plan.label_smoothing
    config = model.generation_config
    for key, value in plan.generation.items():
        setattr(config, key, value)
    if config.num_beams == 1:  # greedy: GenerationConfig refuses to save a beam-only setting
        config.length_penalty = UNSET_LENGTH_PENALTY


def training_summary(plan: RunPlan, seconds: float | None = None) -> str:
    model_args, data_args, args = plan.model_args, plan.data_args, plan.args
    shape = (
        "fine-tuned from " + model_args.model_name_or_path if model_args.model_name_or_path else "trained from scratch"
    )
    batch = (
        f"batches of at most {data_args.max_tokens} padded tokens per device"
        if data_args.max_tokens
        else f"{args.per_device_train_batch_size} sentence pairs per device"
    )
    lines = [
        (
            f"{shape} with `aayn train` on `{data_args.dataset_name}` "
            f"({data_args.source_lang} to {data_args.target_lang}):"
        ),
        (
            f"{args.max_steps if args.max_steps > 0 else args.num_train_epochs} "
            f"{'steps' if args.max_steps > 0 else 'epochs'}, "
            f"{batch} x {args.gradient_accumulation_steps} accumulation x {args.world_size} processes, "
            f"Adam (beta2 {args.adam_beta2}, eps {args.adam_epsilon}), learning rate {args.learning_rate:g} with "
            f"{getattr(args.lr_scheduler_type, 'value', args.lr_scheduler_type)} schedule and {args.warmup_steps:g} "
            f"warmup steps, label smoothing {plan.label_smoothing}."
        ),
    ]
    if plan.average_last:
        lines.append(f"The weights are the average of the last {plan.average_last} checkpoints.")
    if seconds is not None:
        lines.append(f"Training took {seconds / 60:.1f} minutes.")
    return " ".join(lines)


def run(
    model_args: ModelArguments,
    data_args: DataTrainingArguments,
    args: Seq2SeqTrainingArguments,
    callbacks: list[TrainerCallback] | None = None,
) -> dict:
    """Train, evaluate on the test split, save the final hub-ready folder in `output_dir`; return the test metrics."""
    if not args.should_log:  # one log, from the main process: under torchrun every line would come once per process
        logging.get_logger("aayn").setLevel(logging.WARNING)
    return run_plan(plan_run(model_args, data_args, args), callbacks)


def run_plan(plan: RunPlan, callbacks: list[TrainerCallback] | None = None, model_builder=build_model) -> dict:
    """The planned run: every read and check before output_dir is touched (a mistake costs nothing and deletes
    nothing), the data prepared, output_dir claimed, then the trainer built, training run or resumed, the run
    finished. `model_builder(model_args, tokenizer)` makes a new model (benchmarks/demo_vs_marian.py passes its
    Marian with a plan of its own)."""
    model_args, data_args, args = plan.model_args, plan.data_args, plan.args
    pretrained = load_pretrained(model_args) if model_args.model_name_or_path else None
    if pretrained is not None:  # fine-tuning into another direction may be meant: said, not refused
        check_direction(model_args.model_name_or_path, data_args.source_lang, data_args.target_lang, insist=True)
    elif model_builder is build_model:
        check_fits_in_memory(model_config(model_args), str(args.device))
    set_seed(args.seed)
    start = time.perf_counter()
    prepared = prepare(model_args, data_args, args, plan.data)
    logger.info("data: " + ", ".join(f"{split} {len(rows):,} pairs" for split, rows in prepared.splits.items()))
    # only the main process writes output_dir (the data was prepared outside it, the main process first)
    lock = None
    if args.process_index == 0:
        sources = {
            "--model_name_or_path": model_args.model_name_or_path,
            "--tokenizer_name": model_args.tokenizer_name,
            "--resume_from_checkpoint": plan.resume,
        }
        lock = claim_output_dir(
            Path(args.output_dir), resume=plan.resume, overwrite=args.overwrite_output_dir, sources=sources
        )
    try:
        if prepared.new_tokenizer and args.process_index == 0:  # the run's own, for a resume to find
            save_tokenizer(prepared.tokenizer, Path(args.output_dir) / "tokenizer")
        model = pretrained if pretrained is not None else model_builder(model_args, prepared.tokenizer)
        logger.info(f"model: {model_summary(model)}")
        configure_model(model, plan)
        trainer = build_trainer(plan, model, prepared, callbacks)
        train_or_resume(trainer, plan)
        metrics = finish_run(trainer, plan, prepared, start)
    except BaseException:
        if lock is not None:
            lock.release("failed")
        raise
    if lock is not None:
        lock.release("finished")
    return metrics


def model_summary(model) -> str:
    """One line: the model's type, parameter count and shape, as a run starts."""
    config = model.config
    parameters = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    shape = ", ".join(
        f"{name} {getattr(config, key)}"
        for name, key in (("d_model", "d_model"), ("heads", "encoder_attention_heads"), ("ffn", "encoder_ffn_dim"),
                          ("vocabulary", "vocab_size"), ("dropout", "dropout"))
        if getattr(config, key, None) is not None
    )  # fmt: skip
    layers = f"{getattr(config, 'encoder_layers', '?')}+{getattr(config, 'decoder_layers', '?')} layers"
    share = "" if trainable == parameters else f" ({trainable:,} trainable)"
    return f"{config.model_type}, {parameters:,} parameters{share}: {layers}, {shape}"


def needed_splits(data_args: DataTrainingArguments, args: Seq2SeqTrainingArguments) -> dict[str, str]:
    """The splits the run's stages read (do_train, do_eval: evaluations during training, do_predict: the test)."""
    wanted = {"train": args.do_train, "validation": args.do_train and args.do_eval, "test": args.do_predict}
    given = {"train": data_args.train_split, "validation": data_args.validation_split, "test": data_args.test_split}
    return {split: spec for split, spec in given.items() if wanted[split]}


def build_trainer(plan: RunPlan, model, prepared: PreparedData, callbacks=None) -> AaynTrainer:
    """The Trainer over the prepared splits, with the run's metrics, batches, callbacks and model card."""
    args, data_args, tokenizer = plan.args, plan.data_args, prepared.tokenizer
    if data_args.early_stopping_patience is not None:
        stopper = EarlyStoppingCallback(data_args.early_stopping_patience, data_args.early_stopping_threshold)
        callbacks = [*(callbacks or []), stopper]
    card = dict(
        source_lang=data_args.source_lang,
        target_lang=data_args.target_lang,
        dataset=data_args.dataset_name,
        repo_id=args.hub_model_id or Path(args.output_dir).name,
        example=tokenizer.decode(next(iter(prepared.splits.values()))[0]["input_ids"], skip_special_tokens=True),
        license=data_args.license,
        training=training_summary(plan),
    )
    return AaynTrainer(
        model=model,
        args=args,
        train_dataset=prepared.splits.get("train"),
        eval_dataset=prepared.splits.get("validation"),
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(
            tokenizer, model=model, pad_to_multiple_of=8 if args.bf16 or args.fp16 else None
        ),
        compute_metrics=translation_metrics(tokenizer, data_args.target_lang) if args.predict_with_generate else None,
        callbacks=callbacks,
        max_tokens=data_args.max_tokens,
        model_card=card,
    )


def train_or_resume(trainer: AaynTrainer, plan: RunPlan) -> None:
    """Train, or resume from the plan's checkpoint; then the final weights: the average of the last checkpoints
    where the plan says so."""
    args, resume = plan.args, plan.resume
    if not args.do_train:
        logger.info(f"do_train false: testing {plan.model_args.model_name_or_path} as it is")
        return
    if trained_to_the_end(resume, args):
        # the Trainer would take one more step past max_steps and rotate out a good checkpoint
        logger.warning(f"{resume} is at the run's last step: nothing left to train; writing the final folder")
        load_weights(trainer.model, resume)
        trainer.state = TrainerState.load_from_json(str(Path(resume) / "trainer_state.json"))
    else:
        result = trainer.train(resume_from_checkpoint=resume)
        trainer.log_metrics("train", result.metrics)
        trainer.save_metrics("train", result.metrics)
    if plan.average_last:
        wanted, written = plan.average_last, len(last_checkpoints(args.output_dir, 0))
        if written < wanted:  # stopped early: fewer checkpoints than the full run would have left
            logger.warning(f"training stopped early: averaging the {written} checkpoints written, not {wanted}")
        if written:
            load_average(trainer.model, last_checkpoints(args.output_dir, min(wanted, written)))


def finish_run(trainer: AaynTrainer, plan: RunPlan, prepared: PreparedData, start: float) -> dict:
    """Test, then write the final folder (moved in whole), the test translations, the curves; print examples and
    scores; push where asked. Returns the test metrics."""
    args, data_args, tokenizer = plan.args, plan.data_args, prepared.tokenizer
    metrics, hypotheses = {}, None
    if args.do_predict:
        test = prepared.splits["test"]
        prediction = trainer.predict(test, metric_key_prefix="test")
        metrics = prediction.metrics
        trainer.log_metrics("test", metrics)
        trainer.save_metrics("test", metrics)
        if args.predict_with_generate:
            hypotheses = tokenizer.batch_decode(prediction.predictions.clip(min=0), skip_special_tokens=True)
            hypotheses = [" ".join(hypothesis.split("\n")).strip() for hypothesis in hypotheses]  # one line each
    trainer.model_card = {**trainer.model_card, "training": training_summary(plan, time.perf_counter() - start)}
    trainer.results = {name.removeprefix("test_"): value for name, value in metrics.items()}
    # weights, config + code, generation config, tokenizer and the card with the test scores, written beside
    # output_dir's files and moved in whole: a kill or a full disk leaves no half-written final model
    staging = Path(args.output_dir) / FINAL_STAGING
    if args.do_train:
        trainer.save_model(str(staging), _internal_call=True)  # every process: a sharded model is gathered
    if not trainer.is_world_process_zero():
        return metrics
    if hypotheses is not None:  # one line per test sentence, as run_translation.py writes it
        lines = "".join(f"{hypothesis}\n" for hypothesis in hypotheses)
        write_text_atomically(Path(args.output_dir) / "generated_predictions.txt", lines)
    if args.do_train:
        move_final_files(staging, Path(args.output_dir))
        plot_history(trainer.state.log_history, Path(args.output_dir) / "training_curves.png")
    if hypotheses is not None:
        shown = prepared.splits["test"][: data_args.num_examples_to_print]["input_ids"]
        sources = tokenizer.batch_decode(shown, skip_special_tokens=True)  # the source as the model read it
        for source, hypothesis in zip(sources, hypotheses):
            print(f"  {source}\n  -> {hypothesis}")
    if metrics:
        print(json.dumps({k: v for k, v in metrics.items() if k in ("test_bleu", "test_chrf", "test_paper_bleu")}))
    if args.push_to_hub and args.do_train:
        trainer.push_to_hub(commit_message="aayn train: final model")
    return metrics


def trained_to_the_end(resume: str | None, args: Seq2SeqTrainingArguments) -> bool:
    """Whether the checkpoint to resume from already holds the run's last step."""
    if resume is None:
        return False
    state = json.loads((Path(resume) / "trainer_state.json").read_text(encoding="utf-8"))
    last = args.max_steps if args.max_steps > 0 else state.get("max_steps", 0)
    return 0 < last <= state.get("global_step", 0)
