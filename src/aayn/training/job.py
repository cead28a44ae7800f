"""The `aayn train` run: dataset -> tokenizer -> model -> Seq2SeqTrainer -> BLEU -> a hub-ready folder, each step
reading the run's plan (`plan.py`) and building on its model (`model.py`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from transformers import (
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    TrainerState,
    set_seed,
)
from transformers.utils import logging

from ..checks import check_direction, check_fits_in_memory
from ..data import save_tokenizer
from ..data.multilingual import prepare_multilingual
from ..data.prepare import PreparedData, prepare_data
from ..folders import write_text_atomically
from ..languages import pair_name
from .arguments import DataTrainingArguments, ModelArguments
from .average import checkpoint_step, last_checkpoints, load_average, load_weights
from .fsdp import accelerate_fsdp_settings, check_fsdp_launch, meta_model
from .model import build_model, configure_model, load_pretrained, model_summary
from .output import FINAL_STAGING, claim_output_dir, move_final_files
from .plan import RunPlan, plan_run, training_summary
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


def prepare(plan: RunPlan) -> PreparedData:
    """The run's tokenizer and tokenized splits, prepared once (the main process first; the others find them)."""
    with plan.args.main_process_first(desc="preparing the data"):
        tokenizer = given_tokenizer(plan.model_args, plan.args)
        if plan.lang_pairs:
            prepared, data = prepare_multilingual(
                plan.data, plan.lang_pairs, list(plan.data.splits), temperature=plan.sampling_temperature,
                limits=plan.pair_limits, seed=plan.args.seed, tokenizer=tokenizer, num_proc=plan.num_proc,
                source_tokens=plan.source_lang_token,
            )  # fmt: skip
            prepared.rows = data.rows
            for split, sizes in data.sizes.items():
                logger.info(f"{split}: " + ", ".join(f"{pair} {size:,}" for pair, size in sizes.items()))
            return prepared
        return prepare_data(plan.data, list(plan.data.splits), tokenizer=tokenizer, num_proc=plan.num_proc)


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
    finished. `model_builder(plan, tokenizer)` makes a new model (benchmarks/demo_vs_marian.py passes its
    Marian with a plan of its own)."""
    model_args, data_args, args = plan.model_args, plan.data_args, plan.args
    pretrained = load_pretrained(model_args) if model_args.model_name_or_path else None
    if pretrained is not None:  # fine-tuning into another direction may be meant: said, not refused
        check_direction(model_args.model_name_or_path, data_args.source_lang, data_args.target_lang, insist=True)
    elif model_builder is build_model:
        check_fits_in_memory(plan.config, str(args.device))
    if model_builder is build_model and accelerate_fsdp_settings():  # one that would split §3.4's matrix stops here
        check_fsdp_launch(pretrained if pretrained is not None else meta_model(plan.config), str(args.device))
    set_seed(args.seed)
    start = time.perf_counter()
    prepared = prepare(plan)
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
        model = pretrained if pretrained is not None else model_builder(plan, prepared.tokenizer)
        logger.info(f"model: {model_summary(model)}")
        configure_model(model, plan)
        if plan.lang_pairs:  # the folder states its pairs (`aayn serve` offers those)
            model.config.lang_pairs = [pair_name(pair) for pair in plan.lang_pairs]
            if plan.source_lang_token:  # each door then puts the source's token after the target's
                model.config.source_lang_token = True
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


def build_trainer(plan: RunPlan, model, prepared: PreparedData, callbacks=None) -> AaynTrainer:
    """The Trainer over the prepared splits, with the run's metrics, batches, callbacks and model card."""
    args, tokenizer = plan.args, prepared.tokenizer
    if plan.early_stopping is not None:
        callbacks = [*(callbacks or []), EarlyStoppingCallback(*plan.early_stopping)]
    example = tokenizer.decode(next(iter(prepared.splits.values()))[0]["input_ids"], skip_special_tokens=True)
    card = {**plan.card, "example": example, "training": training_summary(plan)}
    return AaynTrainer(
        model=model,
        args=args,
        train_dataset=training_split(plan, prepared),
        eval_dataset=prepared.splits.get("validation"),
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(
            tokenizer, model=model, pad_to_multiple_of=8 if args.bf16 or args.fp16 or plan.bf16_weights else None
        ),
        compute_metrics=translation_metrics(tokenizer, plan.card["target_lang"], rows_of(prepared, "validation"))
        if args.predict_with_generate
        else None,
        callbacks=callbacks,
        max_tokens=plan.max_tokens,
        length_buckets=plan.length_buckets,
        bf16_weights=plan.bf16_weights,
        model_card=card,
    )


def training_split(plan: RunPlan, prepared: PreparedData):
    """The prepared training split, its segmentations drawn anew each epoch with BPE-dropout or SentencePiece
    sampling."""
    train = prepared.splits.get("train")
    if train is None or not (plan.bpe_dropout or plan.sentencepiece_sampling):
        return train
    from datasets import IterableDataset

    from ..data.subwords import BpeDropout, Resegmented, UnigramSampling

    if isinstance(train, IterableDataset):
        raise ValueError(  # noqa: TRY004  a setting that cannot be, answered as every other one is
            "subword regularization redraws prepared examples by their index; a streamed training split has none"
        )
    if plan.bpe_dropout:
        segmenter = BpeDropout(prepared.tokenizer, plan.bpe_dropout)
    else:
        segmenter = UnigramSampling(prepared.tokenizer, *plan.sentencepiece_sampling)
    limits = (plan.data.max_source_length, plan.data.max_target_length)
    return Resegmented(train, segmenter, seed=plan.args.seed, limits=limits)


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
        checkpoints = averaging_candidates(args.output_dir, resume)
        wanted, written = plan.average_last, len(checkpoints)
        if written < wanted:  # stopped early: fewer checkpoints than the full run would have left
            logger.warning(f"training stopped early: averaging the {written} checkpoints written, not {wanted}")
        if written:
            load_average(trainer.model, checkpoints[-wanted:])


def averaging_candidates(output_dir: str, resume: str | None) -> list[Path]:
    """The run's checkpoints, oldest first: those in `output_dir` and, for a run resumed from another folder, the
    checkpoint it resumed from (the same run's earlier one), so that a resumed run averages what the uninterrupted
    run would have."""
    checkpoints, step = last_checkpoints(output_dir, 0), checkpoint_step(Path(resume)) if resume else -1
    if step >= 0 and step not in {checkpoint_step(path) for path in checkpoints}:
        checkpoints = sorted([*checkpoints, Path(resume)], key=checkpoint_step)
    return checkpoints


def rows_of(prepared: PreparedData, split: str) -> list[str] | None:
    """Each row's pair in `split` of a run over several pairs (None: one pair)."""
    return prepared.rows.get(split) if prepared.rows else None


def finish_run(trainer: AaynTrainer, plan: RunPlan, prepared: PreparedData, start: float) -> dict:
    """Test, then write the final folder (moved in whole), the test translations, the curves; print examples and
    scores; push where asked. Returns the test metrics."""
    args, tokenizer = plan.args, prepared.tokenizer
    metrics, hypotheses = {}, None
    if args.do_predict:
        test = prepared.splits["test"]
        if args.predict_with_generate and prepared.rows:
            trainer.compute_metrics = translation_metrics(tokenizer, None, rows_of(prepared, "test"))
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
        shown = prepared.splits["test"][: plan.examples_to_print]["input_ids"]
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
