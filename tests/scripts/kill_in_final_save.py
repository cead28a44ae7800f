"""`aayn train` that kills itself with SIGKILL while it moves its final folder into place, after the first file."""

import os
import signal
import sys

import aayn.training.job
from aayn.training import parse_arguments, run


def move_one_then_die(staging, output):
    first = min(staging.iterdir())
    os.replace(first, output / first.name)
    os.kill(os.getpid(), signal.SIGKILL)


aayn.training.job.move_final_files = move_one_then_die
run(*parse_arguments(sys.argv[1:]))
