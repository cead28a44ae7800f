"""One optimizer step of transformers' own Seq2SeqTrainer on an aayn folder (loaded as remote code, aayn never
imported); writes the training loss and the gradients it would apply (after the all-reduce) to OUT.

    python trainer_gradients.py FOLDER OUT PER_DEVICE_BATCH ACCUMULATION LABEL_SMOOTHING [torchrun for processes]
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

folder, out, batch, accumulation, smoothing = (
    sys.argv[1],
    sys.argv[2],
    int(sys.argv[3]),
    int(sys.argv[4]),
    float(sys.argv[5]),
)
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
model.config.label_smoothing = smoothing
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
features = [tokenizer(source, text_target=target) for source, target in EIGHT_PAIRS]
gradients = {}


class Record(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        for name, parameter in model.named_parameters():
            if parameter.grad is not None:
                gradients[name] = parameter.grad.detach().clone()


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
trainer = Seq2SeqTrainer(
    model=model,
    args=args,
    train_dataset=features,
    processing_class=tokenizer,
    data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
    callbacks=[Record()],
)
loss = trainer.train().training_loss
assert "aayn" not in sys.modules
if int(os.environ.get("RANK", "0")) == 0:
    os.makedirs(out, exist_ok=True)
    save_file({name: g.contiguous() for name, g in gradients.items()}, os.path.join(out, "gradients.safetensors"))
    with open(os.path.join(out, "loss.json"), "w") as file:
        json.dump({"loss": loss, "processes": args.world_size}, file)
