"""What every folder aayn writes carries beside its weights, written one way for every format: the model's config
(where the format has no config.json of its own), its generation config (the search `aayn translate` runs), the
tokenizer with its SentencePiece model as `sentencepiece.model`, the source limit aayn's translation applies and
the model card. A leaf: the formats (`aayn.formats`) and the writers they call import it, it imports neither."""

from __future__ import annotations

import json
from pathlib import Path


def write_beside_weights(folder: Path, model, tokenizer, model_dir: Path | None, *, config: bool = True) -> None:
    """The companions of `model` into `folder` (`config`: where the format has no config.json of its own). The
    tokenizer's `model_max_length` becomes the source limit aayn applies (the smaller of the tokenizer's and the
    position table's); the model card is `model_dir`'s README.md, where there is one."""
    from ..data.tokenizer import save_tokenizer
    from ..model.policy_aayn import source_limit

    if config:
        model.config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    settings["model_max_length"] = source_limit(settings.get("model_max_length"), model.config.max_position_embeddings)
    path.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if model_dir is not None and (Path(model_dir) / "README.md").is_file():
        (folder / "README.md").write_bytes((Path(model_dir) / "README.md").read_bytes())
