"""One ONNX export per model per test run. `torch.onnx.export` traces each of the three graphs anew (about 35 s for
the tiny model on one core), and several modules export the same model (the untrained `saved`, a fairseq
import) to test what they do with an export, not the export itself. Inside `graphs_exported_once()` the graphs of a
model whose config and weights were exported before in this run (by any xdist worker) are copied from that first
export; anything else is exported for real and kept. test_onnx_export.py checks the graphs against torch whichever
module exported them first; its model of the paper's shape is exported for real, and its int8 export quantizes the
float graphs of its module's export."""

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from aayn.formats.onnx import writer as onnx_export
from aayn.model.policy_aayn import FOLDER_RULES


def fingerprint(model) -> str:
    """The model's config and weights, less the decoding rules a folder states (`FOLDER_RULES`: the length limit,
    length normalization, stopping rule), which the search reads and no graph holds: a fairseq import stating
    fairseq's limit and the same import stating §6.1's export the same graphs."""
    config = json.loads(model.config.to_json_string())
    digest = hashlib.sha256(json.dumps({k: v for k, v in config.items() if k not in FOLDER_RULES}).encode())
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()[:24]


@contextlib.contextmanager
def graphs_exported_once(tmp_path_factory):
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "made-once" / "onnx-graphs"
    root.mkdir(parents=True, exist_ok=True)
    export_graphs = onnx_export.export_graphs

    def cached(model, folder: Path) -> None:
        kept = root / fingerprint(model)
        with FileLock(str(kept) + ".lock"):
            if not kept.is_dir():
                staging = root / f".{kept.name}.partial"
                shutil.rmtree(staging, ignore_errors=True)
                staging.mkdir()
                export_graphs(model, staging)
                staging.rename(kept)
        for name in onnx_export.FILES:
            shutil.copyfile(kept / name, Path(folder) / name)

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(onnx_export, "export_graphs", cached)
        yield
