"""`aayn train` that also writes, per process, every training batch it was fed (each example's source and target
ids, as segmented for that batch) and the batch at which each epoch began (for tests)."""

import json
import os
import sys
from pathlib import Path

import transformers
from transformers import TrainerCallback

from aayn.cli.arguments import setup_logging
from aayn.training import parse_arguments, run

collate = transformers.DataCollatorForSeq2Seq.__call__
batches, epoch_starts = [], []


def recording(self, features, *args, **kwargs):
    if self.model is not None and self.model.training:  # training batches only, not evaluation
        batches.append([[list(feature["input_ids"]), list(feature["labels"])] for feature in features])
    return collate(self, features, *args, **kwargs)


class EpochStarts(TrainerCallback):
    def on_epoch_begin(self, args, state, control, **kwargs):
        epoch_starts.append(len(batches))


transformers.DataCollatorForSeq2Seq.__call__ = recording
setup_logging()  # as `aayn train` logs
model_args, data_args, args = parse_arguments(sys.argv[1:])
run(model_args, data_args, args, callbacks=[EpochStarts()])
rank = int(os.environ.get("RANK", "0"))
record = {"world_size": args.world_size, "batches": batches, "epoch_starts": epoch_starts}
Path(args.output_dir, f"seen-{rank}.json").write_text(json.dumps(record))
