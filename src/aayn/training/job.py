"""The `aayn train` job: dataset -> tokenizer -> model -> Seq2SeqTrainer -> BLEU -> a hub-ready folder."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    set_seed,
)
from transformers.utils import logging

from ..configuration_aayn import AaynConfig
from ..data import load_translation_dataset, save_tokenizer, tokenize_dataset, train_tokenizer
from ..modeling_aayn import AaynForConditionalGeneration
from .arguments import DataTrainingArguments, ModelArguments
from .average import checkpoint_step, last_checkpoints, load_average
from .trainer import AaynTrainer, plot_history, translation_metrics

logger = logging.get_logger("aayn.training")

# what the Trainer writes into a checkpoint before the next one may start; a resume needs them all
CHECKPOINT_FILES = ("model.safetensors", "trainer_state.json", "optimizer.pt", "scheduler.pt")


def load_tokenizer(model_args: ModelArguments, data_args: DataTrainingArguments, args: Seq2SeqTrainingArguments, train):
    """The given tokenizer, the fine-tuned model's, or a new shared BPE (trained once, by the main process)."""
    source = model_args.tokenizer_name or model_args.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(source)
    folder = Path(args.output_dir) / "tokenizer"
    with args.main_process_first(desc="training the tokenizer"):
        if (folder / "tokenizer.json").is_file():
            logger.info(f"reusing the tokenizer in {folder} (delete it to train a new one)")
            return AutoTokenizer.from_pretrained(folder)
        tokenizer = train_tokenizer(
            train,
            source_lang=data_args.source_lang,
            target_lang=data_args.target_lang,
            vocab_size=model_args.vocab_size,
        )
        if args.process_index == 0:
            save_tokenizer(tokenizer, folder)
        return tokenizer


def complete_checkpoints(output_dir: str | Path) -> tuple[list[Path], dict[Path, list[str]]]:
    """`checkpoint-N` folders a run can resume from, oldest first, and the others with what they lack (a run
    killed while saving leaves a checkpoint without its trainer state)."""
    complete, incomplete = [], {}
    for folder in sorted(Path(output_dir).glob("checkpoint-*"), key=checkpoint_step):
        if checkpoint_step(folder) < 0:
            continue
        missing = [name for name in CHECKPOINT_FILES if not (folder / name).is_file()]
        if missing:
            incomplete[folder] = missing
        else:
            complete.append(folder)
    return complete, incomplete


def resume_checkpoint(args: Seq2SeqTrainingArguments) -> str | None:
    """`resume_from_checkpoint`: a checkpoint folder, or true (the newest complete one in output_dir)."""
    value = args.resume_from_checkpoint
    if value is None or str(value).lower() in ("false", "no", ""):
        return None
    complete, incomplete = complete_checkpoints(args.output_dir)
    if str(value).lower() in ("true", "yes"):
        if not complete:
            raise ValueError(f"resume_from_checkpoint=true but {args.output_dir} holds no complete checkpoint")
        for folder, missing in incomplete.items():
            if checkpoint_step(folder) > checkpoint_step(complete[-1]):
                logger.warning(f"skipping {folder.name}: it lacks {', '.join(missing)} (a save that did not finish)")
        logger.warning(f"resuming from {complete[-1]}, the newest complete checkpoint")
        return str(complete[-1])
    folder = Path(value)
    missing = [name for name in CHECKPOINT_FILES if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"resume_from_checkpoint={value} cannot be resumed from: it lacks {', '.join(missing)}")
    return str(folder)


def saved_checkpoints(args: Seq2SeqTrainingArguments) -> int | None:
    """How many checkpoints the run will have written by its end, where the arguments tell (None: unknown)."""
    if args.save_strategy == "no":
        return 0
    if args.save_strategy != "steps" or args.max_steps <= 0 or args.save_steps < 1:
        return None
    steps = int(args.save_steps)
    count = args.max_steps // steps + (args.max_steps % steps > 0)  # the Trainer also saves at the last step
    return min(count, args.save_total_limit) if args.save_total_limit else count


def prepare_output_dir(args: Seq2SeqTrainingArguments, data_args: DataTrainingArguments) -> str | None:
    """What can be checked before any work is spent, as run_translation.py does: an earlier run in output_dir is
    resumed when asked, replaced with --overwrite_output_dir, refused otherwise; averaging has checkpoints to
    average; output_dir is writable. Returns the checkpoint to resume from.

    Only the main process, the one that writes output_dir, looks at it: another process looking after the main one
    had begun writing would take that for an earlier run. The others meet it at the tokenizer's barrier."""
    resume = resume_checkpoint(args)
    wanted = data_args.average_last_checkpoints
    count = saved_checkpoints(args)
    if wanted and count is not None and count < wanted:
        raise ValueError(
            f"average_last_checkpoints={wanted}, but save_strategy={args.save_strategy}, save_steps={args.save_steps}, "
            f"max_steps={args.max_steps} and save_total_limit={args.save_total_limit} leave {count} checkpoints at the "
            f"end; save more often, raise save_total_limit, or average fewer"
        )
    if args.process_index == 0:
        claim_output_dir(Path(args.output_dir), resume, args.overwrite_output_dir)
    return resume


def claim_output_dir(output: Path, resume: str | None, overwrite: bool) -> None:
    if output.is_dir() and any(output.iterdir()) and resume is None:
        if not overwrite:
            raise FileExistsError(
                f"output_dir {output} holds an earlier run; resume it with --resume_from_checkpoint true, "
                "replace it with --overwrite_output_dir true, or give another output_dir"
            )
        logger.warning(f"--overwrite_output_dir: deleting the earlier run in {output}")
        shutil.rmtree(output)
    try:
        output.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=output):
            pass
    except OSError as error:
        raise PermissionError(f"output_dir {output} cannot be written: {error}") from None


def build_model(model_args: ModelArguments, tokenizer) -> AaynForConditionalGeneration:
    if model_args.model_name_or_path:
        return AutoModelForSeq2SeqLM.from_pretrained(
            model_args.model_name_or_path, attn_implementation=model_args.attn_implementation
        )
    config = AaynConfig(
        vocab_size=len(tokenizer),
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
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    config._attn_implementation = model_args.attn_implementation
    return AaynForConditionalGeneration(config)


def training_summary(model_args, data_args, args, smoothing: float, seconds: float | None = None) -> str:
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
            f"warmup steps, label smoothing {smoothing}."
        ),
    ]
    if data_args.average_last_checkpoints:
        lines.append(f"The weights are the average of the last {data_args.average_last_checkpoints} checkpoints.")
    if seconds is not None:
        lines.append(f"Training took {seconds / 60:.1f} minutes.")
    return " ".join(lines)


def run(
    model_args: ModelArguments,
    data_args: DataTrainingArguments,
    args: Seq2SeqTrainingArguments,
    callbacks: list[TrainerCallback] | None = None,
    model_builder=build_model,
) -> dict:
    """Train, evaluate on the test split, save the final hub-ready folder in `output_dir`; return the test metrics.

    `model_builder(model_args, tokenizer)` makes the model; the default builds AAYN (benchmarks swap in Marian).
    """
    resume = prepare_output_dir(args, data_args)
    set_seed(args.seed)
    if not args.predict_with_generate:
        # without generation nothing uses the predictions; the Trainer would gather the full-vocabulary logits of
        # every evaluated sentence (the test split of a base model: tens of GB) to hand them to no metric
        args.prediction_loss_only = True
    if args.ddp_find_unused_parameters is None:
        args.ddp_find_unused_parameters = False  # every parameter takes part in every step
    start = time.perf_counter()
    data = load_translation_dataset(
        data_args.dataset_name,
        data_args.dataset_config_name,
        source_lang=data_args.source_lang,
        target_lang=data_args.target_lang,
        splits={"train": data_args.train_split, "validation": data_args.validation_split, "test": data_args.test_split},
        max_train_samples=data_args.max_train_samples,
        max_eval_samples=data_args.max_eval_samples,
        max_predict_samples=data_args.max_predict_samples,
    )
    tokenizer = load_tokenizer(model_args, data_args, args, data["train"])
    model = model_builder(model_args, tokenizer)
    smoothing = args.label_smoothing_factor
    if model.config.model_type == "aayn":
        # the model takes §5.4's loss itself, normalized over the whole accumulated batch; the Trainer's smoother
        # would divide by each micro-batch's tokens instead
        model.config.label_smoothing, args.label_smoothing_factor = smoothing, 0.0
    if data_args.num_beams:
        args.generation_num_beams = data_args.num_beams
    args.generation_max_length = args.generation_max_length or data_args.max_target_length
    if data_args.length_penalty is not None:
        model.generation_config.length_penalty = data_args.length_penalty
    model.generation_config.num_beams = args.generation_num_beams or model.generation_config.num_beams
    if model.generation_config.num_beams == 1:  # greedy: GenerationConfig refuses to save a beam-only setting
        model.generation_config.length_penalty = 1.0
    model.generation_config.max_length = args.generation_max_length
    lengths = dict(
        source_lang=data_args.source_lang,
        target_lang=data_args.target_lang,
        max_source_length=data_args.max_source_length,
        max_target_length=data_args.max_target_length,
        num_proc=data_args.preprocessing_num_workers,
    )
    with args.main_process_first(desc="tokenizing"):
        train = tokenize_dataset(data["train"], tokenizer, overlong=data_args.overlong, **lengths)
        validation = tokenize_dataset(data["validation"], tokenizer, overlong="truncate", **lengths)
        test = tokenize_dataset(data["test"], tokenizer, overlong="truncate", **lengths)
    card = dict(
        source_lang=data_args.source_lang,
        target_lang=data_args.target_lang,
        dataset=data_args.dataset_name,
        repo_id=args.hub_model_id or Path(args.output_dir).name,
        example=data["test"][0]["translation"][data_args.source_lang],
        license=data_args.license,
    )
    trainer = AaynTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=validation,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(
            tokenizer, model=model, pad_to_multiple_of=8 if args.bf16 or args.fp16 else None
        ),
        compute_metrics=translation_metrics(tokenizer) if args.predict_with_generate else None,
        callbacks=callbacks,
        max_tokens=data_args.max_tokens,
        model_card={**card, "training": training_summary(model_args, data_args, args, smoothing)},
    )
    result = trainer.train(resume_from_checkpoint=resume)
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    if data_args.average_last_checkpoints:
        load_average(trainer.model, last_checkpoints(args.output_dir, data_args.average_last_checkpoints))
    prediction = trainer.predict(test, metric_key_prefix="test")
    trainer.log_metrics("test", prediction.metrics)
    trainer.save_metrics("test", prediction.metrics)
    seconds = time.perf_counter() - start
    trainer.model_card = {**card, "training": training_summary(model_args, data_args, args, smoothing, seconds)}
    trainer.results = {name.removeprefix("test_"): value for name, value in prediction.metrics.items()}
    trainer.save_model()  # weights, config + code, generation config, tokenizer, and the card with the test scores
    if trainer.is_world_process_zero():
        plot_history(trainer.state.log_history, Path(args.output_dir) / "training_curves.png")
        if args.predict_with_generate:
            sources = [row["translation"][data_args.source_lang] for row in data["test"]]
            hypotheses = tokenizer.batch_decode(prediction.predictions.clip(min=0), skip_special_tokens=True)
            for source, hypothesis in list(zip(sources, hypotheses))[: data_args.num_examples_to_print]:
                print(f"  {source}\n  -> {hypothesis.strip()}")
        print(json.dumps({k: v for k, v in prediction.metrics.items() if k in ("test_bleu", "test_chrf")}))
        if args.push_to_hub:
            trainer.push_to_hub(commit_message="aayn train: final model")
    return prediction.metrics
