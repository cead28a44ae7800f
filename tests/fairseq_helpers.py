"""The committed fairseq fixtures (tests/data/fairseq/KIND), imported as the fixture script recorded them."""

import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "data" / "fairseq"


def import_as_recorded(kind: str, folder: Path) -> tuple[Path, dict]:
    """The fixture imported into `folder`, with the length limit fairseq's recordings were made under (the record's
    `limit`: --max-len-a 1 --max-len-b 49, §6.1's source + 50) in place of fairseq's default (200 tokens) that
    `aayn import` writes; returns (folder, the record)."""
    from aayn.formats import import_fairseq

    record = json.loads((FIXTURES / kind / "fairseq.json").read_text(encoding="utf-8"))
    import_fairseq(FIXTURES / kind / "checkpoint.pt", folder, source_lang="en", target_lang="fr")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["length_limit"] = [record["limit"]["max_len_a"], record["limit"]["max_len_b"]]
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return folder, record


def with_random_weights(checkpoint: Path, out: Path, seed: int) -> Path:
    """The fairseq checkpoint with every weight drawn anew (seeded; torch only, so that fairseq's venv and the tests
    draw the same): matrices N(0, 1/fan_in), vectors N(0, 0.02²), LayerNorms, buffers and versions as they were; a
    tensor several keys share (tied embeddings) stays one tensor. A model that has learned nothing: its outputs run to
    the length limit, where the search's last-step rules decide."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    generator = torch.Generator().manual_seed(seed)
    drawn: dict[int, torch.Tensor] = {}
    for name in sorted(state["model"]):
        tensor = state["model"][name]
        if not tensor.is_floating_point() or "layer_norm" in name or name.endswith(("_float_tensor", ".version")):
            continue  # a stack's version (a float) decides whether fairseq runs its final layer norm
        key = tensor.untyped_storage().data_ptr()
        if key not in drawn:
            std = tensor.shape[-1] ** -0.5 if tensor.dim() >= 2 else 0.02
            drawn[key] = torch.randn(tensor.shape, generator=generator, dtype=torch.float64).to(tensor.dtype) * std
        state["model"][name] = drawn[key]
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, out)
    return out
