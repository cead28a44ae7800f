"""`aayn train` (argv[2:]) that writes, when training ends, the weights each process's optimizer updated (with
bf16_weights, the float32 masters) to argv[1]/rank-RANK.safetensors: what each process of a launch holds."""

import os
import sys
from pathlib import Path

from safetensors.torch import save_file
from transformers import TrainerCallback

from aayn.training import parse_arguments, run


class KeepWeights(TrainerCallback):
    def __init__(self, folder: Path):
        self.folder = folder

    def on_train_end(self, args, state, control, optimizer=None, **kwargs):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        weights = {str(i): p.detach().float().clone().contiguous() for i, p in enumerate(params)}
        self.folder.mkdir(parents=True, exist_ok=True)
        save_file(weights, self.folder / f"rank-{os.environ.get('RANK', '0')}.safetensors")


run(*parse_arguments(sys.argv[2:]), callbacks=[KeepWeights(Path(sys.argv[1]))])
