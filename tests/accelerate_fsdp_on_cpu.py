"""Run by torchrun from test_fsdp.py in place of `-m aayn.train`: `aayn.train` through Accelerate's own FSDP2 path
on CPU, over gloo. Given an FSDP config on CPU, Accelerate keeps its distributed type MULTI_CPU and runs plain DDP;
here its state takes the type and the plugin it takes on GPUs, so that the Trainer, Accelerate's FSDP2 preparation,
its gathering of the weights for each checkpoint and the final folder, its optimizer files, and aayn's hooks all
run as `accelerate launch --config_file recipes/accelerate/fsdp2.yaml -m aayn.train` runs them on GPUs. (With torch
2.11 this runs into the error an H200 met before `aayn.training.fsdp.gathered_before_use`: docs/measurements.md.)"""

import runpy
import sys

from accelerate.state import AcceleratorState, DistributedType, PartialState

accelerator_state_init = AcceleratorState.__init__


def init(self, *args, fsdp_plugin=None, **kwargs):
    accelerator_state_init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
        self.fsdp_plugin = fsdp_plugin


AcceleratorState.__init__ = init
sys.argv = ["aayn.train", *sys.argv[1:]]
runpy.run_module("aayn.train", run_name="__main__", alter_sys=True)
