"""Run under torch.distributed.run with 2 processes (gloo): each decodes its own sentences, with a different length
limit, under a forward that runs a collective on every call of every decoder layer and of the output layer (as a
sharded model's forward gathers its parameters). argv: OUTPUT_DIR SYNCED(0/1) [COLLECTIVE_TIMEOUT_S]. Writes
result-RANK.json."""

import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parents[1]))
from tiny_models import random_batch, tiny_config

from aayn import AaynForConditionalGeneration

out, synced = Path(sys.argv[1]), sys.argv[2] == "1"
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
# the forward's collectives in a group of their own: a short timeout shows a missing partner in seconds
group = dist.new_group(timeout=timedelta(seconds=float(sys.argv[3]) if len(sys.argv) > 3 else 60))
rank = dist.get_rank()
torch.manual_seed(0)
model = AaynForConditionalGeneration(tiny_config()).eval()
torch.manual_seed(1 + rank)
source, mask = random_batch(3, 7, 40, [7, 4, 2])
limit = 3 if rank == 0 else 11  # rank 0's sentences are done long before rank 1's
kwargs = dict(attention_mask=mask, num_beams=1 + rank, max_new_tokens=limit, return_dict_in_generate=True)
alone = model.generate(source, **kwargs)  # before any collective: the reference

calls = []


def collective(module, args):
    flag = torch.ones(1)
    dist.all_reduce(flag, group=group)  # blocks until the other process runs the same module
    calls.append(1)


for module in [*model.get_decoder().layers, model.lm_head]:
    module.register_forward_pre_hook(collective)
together = model.generate(source, synced_gpus=synced, **kwargs)
dist.barrier()
(out / f"result-{rank}.json").write_text(
    json.dumps(
        {
            "calls": len(calls),
            # the hooked output layer is called instead of the decoding copy: another summation order
            "same": torch.equal(alone.sequences, together.sequences)
            and torch.allclose(alone.sequences_scores, together.sequences_scores, rtol=1e-5, atol=1e-6),
        }
    )
)
dist.destroy_process_group()
