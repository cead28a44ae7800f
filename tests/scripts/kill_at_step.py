"""`aayn train` that kills itself with SIGKILL right after optimizer step N (argv[1]), like a crash or a preemption."""

import os
import signal
import sys

from transformers import TrainerCallback

from aayn.training import parse_arguments, run


class KillAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


run(*parse_arguments(sys.argv[2:]), callbacks=[KillAt(int(sys.argv[1]))])
