"""`aayn evaluate`: BLEU and chrF of a saved model on a split of a local corpus."""

import json

from aayn.cli import main as aayn


def test_evaluate_reads_only_the_split_asked_for(saved, tmp_path, capsys):
    folder, _, _ = saved
    data = tmp_path / "only-test"
    data.mkdir()
    (data / "test.en").write_text("One two.\nThree.\n")
    (data / "test.fr").write_text("Un deux.\nTrois.\n")
    argv = ["evaluate", "--model", folder, "--dataset_name", data, "--source_lang", "en", "--target_lang", "fr"]
    assert aayn([*map(str, argv), "--num_beams", "1", "--max_new_tokens", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 2
