"""`aayn train` that stops after optimizer step N (argv[1]), says "paused" on stdout, and goes on once the file
argv[2] exists: a run caught in the middle of its work."""

import sys
import time
from pathlib import Path

from transformers import TrainerCallback

from aayn.training import parse_arguments, run


class PauseAt(TrainerCallback):
    def __init__(self, step: int, go: Path):
        self.step, self.go = step, go

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            print("paused", flush=True)
            while not self.go.exists():
                time.sleep(0.05)


run(*parse_arguments(sys.argv[3:]), callbacks=[PauseAt(int(sys.argv[1]), Path(sys.argv[2]))])
