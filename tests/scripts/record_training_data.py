"""`aayn train` that also writes, per process, the source ids of every training example it was fed (for tests)."""

import json
import os
import sys
from pathlib import Path

import transformers

from aayn.cli.arguments import setup_logging
from aayn.training import parse_arguments, run

collate = transformers.DataCollatorForSeq2Seq.__call__
seen = []


def recording(self, features, *args, **kwargs):
    if self.model is not None and self.model.training:  # training batches only, not evaluation
        seen.extend(list(feature["input_ids"]) for feature in features)
    return collate(self, features, *args, **kwargs)


transformers.DataCollatorForSeq2Seq.__call__ = recording
setup_logging()  # as `aayn train` logs
model_args, data_args, args = parse_arguments(sys.argv[1:])
run(model_args, data_args, args)
rank = int(os.environ.get("RANK", "0"))
Path(args.output_dir, f"seen-{rank}.json").write_text(json.dumps({"world_size": args.world_size, "seen": seen}))
