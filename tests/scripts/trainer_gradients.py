"""One optimizer step of transformers' own Seq2SeqTrainer on an aayn folder (loaded as remote code, aayn never
imported), for each setting in turn, each from the folder's weights; writes the training loss and the gradients
it would apply (after the all-reduce) to OUT/SMOOTHING-BATCH-ACCUMULATION.

    python trainer_gradients.py FOLDER OUT SMOOTHING:PER_DEVICE_BATCH:ACCUMULATION[,...] [torchrun for processes]
"""

import json
import os
import sys
from pathlib import Path

from safetensors.torch import save_file
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)

sys.path.insert(0, str(Path(__file__).parents[1]))
from training_helpers import EIGHT_PAIRS

folder, out_root = sys.argv[1], sys.argv[2]
settings = [(float(s), int(b), int(a)) for s, b, a in (item.split(":") for item in sys.argv[3].split(","))]
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
features = [tokenizer(source, text_target=target) for source, target in EIGHT_PAIRS]


class Record(TrainerCallback):
    def __init__(self):
        self.gradients = {}

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        for name, parameter in model.named_parameters():
            if parameter.grad is not None:
                self.gradients[name] = parameter.grad.detach().clone()


for smoothing, batch, accumulation in settings:
    out = os.path.join(out_root, f"{smoothing}-{batch}-{accumulation}")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    model.config.label_smoothing = smoothing
    args = Seq2SeqTrainingArguments(
        out,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=1e-3,
        max_grad_norm=0.0,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        dataloader_pin_memory=False,
        seed=0,
    )
    record = Record()
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=features,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        callbacks=[record],
    )
    loss = trainer.train().training_loss
    if int(os.environ.get("RANK", "0")) == 0:
        os.makedirs(out, exist_ok=True)
        gradients = {name: g.contiguous() for name, g in record.gradients.items()}
        save_file(gradients, os.path.join(out, "gradients.safetensors"))
        with open(os.path.join(out, "loss.json"), "w") as file:
            json.dump({"loss": loss, "processes": args.world_size}, file)
assert "aayn" not in sys.modules
