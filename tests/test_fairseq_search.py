"""fairseq's own default search on hundreds of verses of four fairseq 0.12 models, recorded by fairseq itself
(`fairseq-interactive` with no search options: beam 5, lenpen 1, at most 200 tokens before eos;
tests/scripts/record_fairseq_search.py): the two committed fixtures as trained (post-norm SentencePiece, pre-norm
Moses + BPE) and each with its weights drawn anew (`with_random_weights`: a model that learned nothing, whose
hypotheses meet the length limit, where the search's last-step rules decide). The folder `aayn import` writes, with
no options, gives fairseq's text on every verse, all of them translated in one run (each keeps its own limit)."""

import json
import shutil

import pytest
from fairseq_helpers import FIXTURES, with_random_weights

RECORDED = json.loads((FIXTURES / "default_search.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_the_imported_folder_s_default_search_is_fairseq_interactive_s(tmp_path, name):
    from aayn.formats import import_fairseq
    from aayn.translation.opening import open_translator

    record = RECORDED[name]
    fixture = FIXTURES / record["fixture"]
    checkpoint = fixture / "checkpoint.pt"
    if record["seed"] is not None:  # the same weights fairseq decoded: drawn again, beside the fixture's files
        for path in fixture.iterdir():
            if path.name not in ("checkpoint.pt", "fairseq.json"):
                shutil.copy(path, tmp_path / path.name)
        checkpoint = with_random_weights(fixture / "checkpoint.pt", tmp_path / "checkpoint.pt", record["seed"])
    folder = import_fairseq(checkpoint, tmp_path / "imported", source_lang="en", target_lang="fr")
    ours = open_translator([str(folder)]).translate(record["sources"])
    theirs = [row["D"] for row in record["fairseq_interactive"]]
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert differ == [], f"{len(differ)} of {len(theirs)} verses differ, first: {differ[:5]}"
