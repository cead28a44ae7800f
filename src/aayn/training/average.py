"""Checkpoint averaging (§6.1: "we used a single model obtained by averaging the last 5 checkpoints"; 20 for big).

transformers has no checkpoint averaging; this is fairseq's `average_checkpoints.py` for saved HF folders.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import PreTrainedModel
from transformers.utils import logging

from ..folders import check_new_folder

logger = logging.get_logger(__name__)

WEIGHTS = "model.safetensors"


def checkpoint_step(path: Path) -> int:
    match = re.fullmatch(r"checkpoint-(\d+)", path.name)
    return int(match.group(1)) if match else -1


def last_checkpoints(output_dir: str | Path, count: int) -> list[Path]:
    """The `count` most recent `checkpoint-N` folders of a training run, oldest first."""
    checkpoints = sorted(
        (p for p in Path(output_dir).glob("checkpoint-*") if checkpoint_step(p) >= 0), key=checkpoint_step
    )
    if len(checkpoints) < count:
        raise ValueError(
            f"average_last_checkpoints={count} but {output_dir} holds {len(checkpoints)} checkpoints; "
            f"save more often or set save_total_limit >= {count}"
        )
    return checkpoints[-count:]


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except Exception as error:  # noqa: BLE001  safetensors raises its own error types for a cut or corrupt file
        raise ValueError(f"{path} is not a readable safetensors file ({error}); was its save cut short?") from None


def averaged_state_dict(checkpoints: list[str | Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the checkpoints' weights, accumulated in float64, cast back to each tensor's dtype."""
    if not checkpoints:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for number, checkpoint in enumerate(checkpoints):
        path = Path(checkpoint) / WEIGHTS
        if not path.is_file():
            raise FileNotFoundError(f"checkpoint {checkpoint} has no {WEIGHTS}")
        weights = read_weights(path)
        if number and set(weights) != set(total):
            raise ValueError(
                f"checkpoint {checkpoint} holds other tensors than {checkpoints[0]}: "
                f"{sorted(set(weights) ^ set(total))[:5]}"
            )
        for name in sorted(weights):
            tensor = weights[name]
            if number and tensor.shape != total[name].shape:
                raise ValueError(
                    f"{name} is {tuple(tensor.shape)} in {checkpoint} "
                    f"but {tuple(total[name].shape)} in {checkpoints[0]}"
                )
            dtypes[name] = tensor.dtype
            total[name] = total[name] + tensor.double() if number else tensor.double()
    return {name: (value / len(checkpoints)).to(dtypes[name]) for name, value in total.items()}


def copy_weights(model: PreTrainedModel, weights: dict[str, torch.Tensor]) -> None:
    """Each tensor into the model's parameter of that name; into a sharded one (FSDP2's DTensor) its own shard."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    parameters = model.state_dict()
    with torch.no_grad():
        for name, value in weights.items():
            if name not in parameters:
                raise ValueError(f"checkpoint tensor {name} is not a parameter of the model")
            target = parameters[name]
            if isinstance(target, DTensor):  # every process read the same checkpoints: each keeps its shard
                value = distribute_tensor(value.to(target.device), target.device_mesh, target.placements)
            target.copy_(value)


def load_weights(model: PreTrainedModel, checkpoint: str | Path) -> PreTrainedModel:
    """Put one checkpoint's weights into `model`, in place."""
    copy_weights(model, read_weights(Path(checkpoint) / WEIGHTS))
    return model


def load_average(
    model: PreTrainedModel, checkpoints: list[str | Path], averaged: dict[str, torch.Tensor] | None = None
) -> PreTrainedModel:
    """Put the average of the checkpoints' weights (`averaged`, if already computed) into `model`, in place."""
    copy_weights(model, averaged_state_dict(checkpoints) if averaged is None else averaged)
    logger.info(
        f"averaged the weights of {len(checkpoints)} checkpoints: {', '.join(Path(c).name for c in checkpoints)}"
    )
    return model


def average_checkpoints(checkpoints: list[str | Path], output_dir: str | Path) -> Path:
    """A complete model folder (weights, config, code, tokenizer, generation config, card) holding the average.

    Everything else is taken from the last checkpoint. The folder is written next to `output_dir` and moved into
    place at the end, so a failure leaves nothing half-written.
    """
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from ..cards import card_metadata
    from ..formats import HOME
    from ..formats.aayn import SavedModel

    checkpoints = [Path(c) for c in checkpoints]
    for checkpoint in checkpoints:
        if not (checkpoint / WEIGHTS).is_file():
            raise FileNotFoundError(f"checkpoint {checkpoint} has no {WEIGHTS}")
    last = checkpoints[-1]
    if not (last / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"checkpoint {last} holds no tokenizer (tokenizer.json): the averaged folder could not translate; "
            "average checkpoints written by aayn train or save_pretrained with their tokenizer"
        )
    output = Path(output_dir)
    check_new_folder(output, "output_dir")  # before the checkpoints are read
    averaged = averaged_state_dict(checkpoints)  # every file read and checked before anything else
    model = load_average(AutoModelForSeq2SeqLM.from_pretrained(last), checkpoints, averaged)
    card = card_metadata(last)
    training = f"Average of the weights of {len(checkpoints)} checkpoints ({', '.join(c.name for c in checkpoints)})."
    card = card and {**card, "training": training, "results": None}
    return HOME.write(SavedModel(model, AutoTokenizer.from_pretrained(last), card), output)
