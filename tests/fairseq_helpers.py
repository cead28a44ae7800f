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
