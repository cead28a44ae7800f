"""Run by `torchrun --nproc_per_node 2` (gloo, CPU) from test_fsdp.py: for each config named on the command line,
the same model trained 20 steps under DDP and under aayn's FSDP2 wrapping (`aayn.training.fsdp.shard`, with the
layer classes of recipes/accelerate/fsdp2.yaml), a sharded checkpoint at step 10 resumed into a fresh sharded model
for the last 10 steps, and `generate(synced_gpus=True)` on each rank's own sentences. Rank 0 writes what the test
compares into the JSON file named last."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import yaml
from tiny_models import random_batch, tiny_config
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from aayn import AaynForConditionalGeneration
from aayn.training.fsdp import shard

ROOT = Path(__file__).resolve().parents[1]
STEPS, CHECKPOINT = 20, 10
CONFIGS = {
    "tied-postnorm": {},  # §3.4: one matrix, four holders
    "untied-prenorm": dict(
        share_encoder_decoder_embeddings=False, decoder_vocab_size=36, norm_first=True, tie_word_embeddings=True
    ),  # fmt: skip  the decoder's embedding and lm_head: two holders
}
LAYERS = yaml.safe_load((ROOT / "recipes" / "accelerate" / "fsdp2.yaml").read_text())["fsdp_config"]
LAYERS = LAYERS["fsdp_transformer_layer_cls_to_wrap"].split(",")


def batches(config, rank: int) -> list:
    """Each rank's own batches, the same in every arm."""
    generator = torch.Generator().manual_seed(100 + rank)
    made = []
    for _ in range(STEPS):
        ids = torch.randint(4, config.vocab_size, (3, 7), generator=generator)
        labels = torch.randint(4, config.decoder_vocab_size, (3, 6), generator=generator)
        labels[rank, 4:] = -100
        made.append((ids, torch.ones_like(ids), labels))
    return made


def new_model(config):
    torch.manual_seed(0)
    return AaynForConditionalGeneration(config).train()


def new_optimizer(model):
    """SGD with momentum: Adam's step on a gradient near zero is ±lr whatever the gradient's last bits, so the weights
    of two arms that agree to float noise would differ by lr where a gradient is that small."""
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train(model, optimizer, data, losses: list) -> None:
    for ids, mask, labels in data:
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / dist.get_world_size())


def sharded(config):
    model = shard(new_model(config), LAYERS)
    return model, new_optimizer(model)


def one_config(name: str, rank: int, folder: Path) -> dict:
    config = tiny_config(**CONFIGS[name])
    data = batches(config, rank)
    ddp = DistributedDataParallel(new_model(config))
    ddp_losses = []
    train(ddp, new_optimizer(ddp), data, ddp_losses)

    model, optimizer = sharded(config)
    all_dtensors = all(isinstance(p, DTensor) for p in model.parameters())
    fsdp_losses = []
    train(model, optimizer, data[:CHECKPOINT], fsdp_losses)
    checkpoint = str(folder / f"{name}-step{CHECKPOINT}")
    weights, state = get_state_dict(model, optimizer)
    dcp.save({"model": weights, "optimizer": state}, checkpoint_id=checkpoint)
    train(model, optimizer, data[CHECKPOINT:], fsdp_losses)

    resumed, resumed_optimizer = sharded(config)  # a fresh process's model, from the checkpoint
    weights, state = get_state_dict(resumed, resumed_optimizer)
    loaded = {"model": weights, "optimizer": state}
    dcp.load(loaded, checkpoint_id=checkpoint)
    set_state_dict(resumed, resumed_optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optimizer"])
    resumed_losses = []
    train(resumed, resumed_optimizer, data[CHECKPOINT:], resumed_losses)

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    reference = ddp.module.state_dict()
    differences = {key: (full[key] - reference[key]).abs().max().item() for key in full}

    model.eval(), ddp.module.eval()
    source, mask = random_batch(2, 3 + 4 * rank, config.vocab_size)  # ranks of different lengths and steps
    settings = dict(attention_mask=mask, max_new_tokens=4 + 3 * rank, num_beams=2)
    with torch.no_grad():
        generated = model.generate(source, synced_gpus=True, **settings).tolist()
        expected = ddp.module.generate(source, **settings).tolist()
    result = {
        "all_dtensors": all_dtensors,
        "ddp": ddp_losses,
        "fsdp": fsdp_losses,
        "resumed": resumed_losses,
        "max_difference": max(differences.values()),
        "gathered": sorted(full) == sorted(reference),
        "ties": model.ties(),
        "generate_equal": [generated == expected],
    }
    if rank == 0:
        unsharded = AaynForConditionalGeneration(config)
        unsharded.load_state_dict(full)
        unsharded.save_pretrained(folder / name)
    return result


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    *names, output = sys.argv[1:]
    folder = Path(output).parent
    results = {name: one_config(name, rank, folder) for name in names}
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {name: result["generate_equal"] for name, result in results.items()})
    for name in names:
        results[name]["generate_equal"] = [each[name][0] for each in gathered]
    if rank == 0:
        Path(output).write_text(json.dumps(results), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
