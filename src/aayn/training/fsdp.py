"""FSDP2 (torch's `fully_shard`) for aayn's models, as Accelerate's FSDP2 plugin configures it.

§3.4's one matrix is held by up to four modules (`model.shared`, the encoder's and the decoder's token embeddings,
`lm_head`), each its own module so that loading names each key. From torch 2.13 a parameter that two FSDP units
see raises, and Accelerate's FSDP2 preparation groups only `get_input_embeddings()` with `lm_head`: the other two
holders would land in the root unit. `shard` makes the units here: each layer of `_no_split_modules` (or the
classes the config names) one unit, every holder of each tied matrix together in one unit, the rest in the root.
The Trainer shards the model this way before Accelerate prepares it (`AaynTrainer.train`); Accelerate leaves a
model that is already sharded as it is. `check_wrapping` refuses, before any work, a wrapping that would put a
holder of a tied matrix in one unit and another holder outside it.
"""

from __future__ import annotations

import os

from torch import nn
from transformers.utils import logging

logger = logging.get_logger(__name__)

# what aayn shards by (SIZE_BASED_WRAP would give the big embedding matrices units of their own)
WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "NO_WRAP")


class FSDPWrappingError(ValueError):
    """An FSDP wrapping that aayn's model cannot train under (said in one line)."""


def tied_holders(model: nn.Module) -> list[list[tuple[str, nn.Module]]]:
    """For each parameter held by more than one module, its holders as (name, module), in the model's order."""
    holders: dict[int, list[tuple[str, nn.Module]]] = {}
    for name, module in model.named_modules():
        for parameter in module.parameters(recurse=False):
            holders.setdefault(id(parameter), []).append((name, module))
    return [group for group in holders.values() if len(group) > 1]


def layer_classes(model: nn.Module, names: list[str] | None = None) -> set[type]:
    """The module classes named (default: the model's `_no_split_modules`), each found in the model."""
    names = list(names) if names else list(getattr(model, "_no_split_modules", None) or [])
    found = {type(module).__name__: type(module) for module in model.modules()}
    missing = [name for name in names if name not in found]
    if missing:
        raise FSDPWrappingError(
            f"fsdp_transformer_layer_cls_to_wrap names {', '.join(missing)}, which {type(model).__name__} does not "
            f"have (its layers: {', '.join(getattr(model, '_no_split_modules', []))})"
        )
    return {found[name] for name in names}


def check_wrapping(model: nn.Module, names: list[str] | None = None, policy: str = "TRANSFORMER_BASED_WRAP") -> None:
    """Refuse, in one line, a wrapping under which a tied matrix's holders would not all be in one unit."""
    if policy not in WRAP_POLICIES:
        raise FSDPWrappingError(
            f"fsdp_auto_wrap_policy {policy} would give the embedding matrix units of their own and split §3.4's "
            f"tied matrix; use TRANSFORMER_BASED_WRAP (recipes/accelerate/fsdp2.yaml)"
        )
    classes = layer_classes(model, names) if policy == "TRANSFORMER_BASED_WRAP" else set()
    for group in tied_holders(model):
        for unit_name, unit in model.named_modules():
            if type(unit) not in classes:
                continue
            inside = [name for name, holder in group if any(holder is module for module in unit.modules())]
            if inside and len(inside) < len(group):
                outside = [name for name, _ in group if name not in inside]
                raise FSDPWrappingError(
                    f"fsdp_transformer_layer_cls_to_wrap {type(unit).__name__} would shard {unit_name or 'the model'} "
                    f"(holding {', '.join(inside)}) apart from {', '.join(outside)}: §3.4's tied matrix must stay "
                    f"in one FSDP unit; wrap the layers only ({', '.join(model._no_split_modules)})"
                )


def shard(model: nn.Module, names: list[str] | None = None, policy: str = "TRANSFORMER_BASED_WRAP", **kwargs):
    """`fully_shard` the model in place: each layer a unit (with `policy` TRANSFORMER_BASED_WRAP), all holders of
    each tied matrix one unit (kept gathered from the forward to the backward, as Accelerate keeps its tied
    embedding and output layer), the rest the root. `kwargs` go to every `fully_shard` (mesh, mp_policy,
    offload_policy, reshard_after_forward). `generate` gathers the root's parameters as `forward` does."""
    from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method

    check_wrapping(model, names, policy)
    classes = layer_classes(model, names) if policy == "TRANSFORMER_BASED_WRAP" else set()
    for module in reversed(list(model.modules())):  # bottom up, as Accelerate goes
        if type(module) in classes and module is not model and not isinstance(module, FSDPModule):
            fully_shard(module, **kwargs)
    for group in tied_holders(model):
        holders = [module for _, module in group]
        fully_shard(holders, **{**kwargs, "reshard_after_forward": False})
        for holder in holders:  # after FSDP's own pre-forward hook
            holder.register_forward_pre_hook(gathered_before_use)
    fully_shard(model, **{key: value for key, value in kwargs.items() if key != "reshard_after_forward"})
    if hasattr(model, "generate"):
        register_fsdp_forward_method(model, "generate")
    return model


def gathered_before_use(module: nn.Module, args) -> None:
    """A holder of a tied matrix about to run with the matrix still sharded: gather it (`FSDPModule.unshard`).
    FSDP runs a unit's pre-forward on the first of its modules to run in a pass, and before torch 2.13 a pass ends
    only when every one of them has run; `model.shared` never runs, so after an evaluation (no backward to end the
    pass) and a reshard outside any pass (a `state_dict()`: a checkpoint, the averaging) the next forward met the
    sharded matrix (seen on an H200 with torch 2.11: docs/measurements.md, GPU). A no-op otherwise."""
    from torch.distributed.tensor import DTensor

    if any(isinstance(parameter, DTensor) for parameter in module.parameters(recurse=False)):
        module.unshard()


def accelerate_fsdp_settings() -> dict | None:
    """What `accelerate launch --config_file` hands the training processes about FSDP (its FSDP_* variables), or
    None where it hands none."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
        return None
    names = os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP")
    return {
        "version": int(os.environ.get("FSDP_VERSION", "1")),
        "policy": os.environ.get("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP"),
        "names": [name.strip() for name in names.split(",")] if names else None,
    }


def meta_model(config) -> nn.Module:
    """A model of `config` without memory (on torch's meta device): its modules, for `check_fsdp_launch`."""
    import torch

    from ..model.modeling_aayn import AaynForConditionalGeneration

    with torch.device("meta"):
        return AaynForConditionalGeneration(config)


def check_fsdp_launch(model: nn.Module, device: str = "cuda") -> dict | None:
    """Before any work: the FSDP settings Accelerate was launched with, refused in one line where their wrapping
    would split a tied matrix; None without FSDP. On CPU Accelerate runs an FSDP
    config as plain DDP (each process holding the whole model): said, once."""
    settings = accelerate_fsdp_settings()
    if settings is None:
        return None
    check_wrapping(model, settings["names"], settings["policy"])
    if not device.startswith("cuda") and os.environ.get("LOCAL_RANK", "0") == "0":
        logger.warning(f"an FSDP config on {device}: Accelerate runs it as DDP here, every process holding the model")
    return settings


def shard_for_trainer(trainer) -> None:
    """Under Accelerate's FSDP2 plugin: shard the trainer's model by `shard`, with the plugin's settings, before
    Accelerate prepares it (Accelerate then leaves it as it is)."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy

    plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None)
    if plugin is None or getattr(plugin, "fsdp_version", 1) != 2 or isinstance(trainer.model, FSDPModule):
        return
    # Accelerate's own first step, on the model as it is: it looks the layer classes up by name, which the classes
    # `fully_shard` makes (FSDPAaynEncoderLayer) no longer match; once set, Accelerate's own call leaves it as it is
    plugin.set_auto_wrap_policy(trainer.model)
    wrap = plugin.auto_wrap_policy  # a policy function (or its name, before Accelerate sets it) or None
    name = str(getattr(getattr(wrap, "func", wrap), "__name__", wrap)).lower()
    policy = "NO_WRAP" if wrap is None or "no_wrap" in name else "SIZE_BASED_WRAP" if "size" in name else None
    policy = policy or "TRANSFORMER_BASED_WRAP"
    shard(
        trainer.model,
        plugin.transformer_cls_names_to_wrap,
        policy,
        reshard_after_forward=plugin.reshard_after_forward,
        offload_policy=plugin.cpu_offload,
        mp_policy=plugin.mixed_precision_policy or MixedPrecisionPolicy(),
    )
    units = [name or "the root" for name, module in trainer.model.named_modules() if isinstance(module, FSDPModule)]
    logger.info(f"FSDP2: {len(units)} units ({', '.join(units[:3])}, ...), each parameter a DTensor sharded over "
                f"{next(trainer.model.parameters()).device_mesh.size()} processes")  # fmt: skip
