"""Bulk translation on Ray Data (`aayn translate --input ... --ray`, `aayn.bulk_ray`), on one local Ray started once
for the module (`ray.init(num_cpus=2)`): two actors give every shard what the same command gives it in one process;
a rerun starts no work; a bad shard is named in one line, out of Ray's wrapping."""

import json

import pytest
from cli_helpers import fails

from aayn.cli import main as aayn

ray = pytest.importorskip("ray")
pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def shards(folder):
    folder.mkdir(parents=True, exist_ok=True)
    texts = ["Six one eight.", "Two.", "Zero nine nine five three four.", "One."]
    for shard in range(3):
        (folder / f"part-{shard}.txt").write_text("".join(f"{t}\n" for t in texts[shard:] + texts[:shard]))
    (folder / "rows.jsonl").write_text("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(texts)))
    pq.write_table(pa.table({"text": texts}), folder / "rows.parquet")


def test_two_actors_translate_every_shard_as_one_process_does(saved, local_ray, tmp_path, capsys):
    shards(tmp_path / "in")
    model = ["translate", "--model", str(saved[0]), "--input", str(tmp_path / "in")]
    assert aayn([*model, "--output_dir", str(tmp_path / "here")]) == 0
    assert aayn([*model, "--output_dir", str(tmp_path / "ray"), "--ray", "--concurrency", "2"]) == 0
    assert "5 shards (0 already done), 20 lines" in capsys.readouterr().err
    for shard in sorted(p.name for p in (tmp_path / "here").iterdir()):
        assert (tmp_path / "ray" / shard).read_bytes() == (tmp_path / "here" / shard).read_bytes() or (
            shard.endswith(".parquet") and pq.read_table(tmp_path / "ray" / shard).equals(
                pq.read_table(tmp_path / "here" / shard)))  # fmt: skip
    assert aayn([*model, "--output_dir", str(tmp_path / "ray"), "--ray"]) == 0
    assert "5 shards (5 already done), 0 lines" in capsys.readouterr().err


def test_a_bad_shard_is_named_in_one_line_through_ray(saved, local_ray, tmp_path, capsys):
    shards(tmp_path / "in")
    (tmp_path / "in" / "rows.jsonl").write_text('{"text": "Two."}\n{broken\n')
    message = fails(capsys, "translate", "--model", saved[0], "--input", tmp_path / "in", "--output_dir",
                    tmp_path / "out", "--ray", "--concurrency", 2)  # fmt: skip
    assert "rows.jsonl:2: not a JSON object" in message
    assert not (tmp_path / "out" / "rows.jsonl").exists()
    assert "--ray translates a corpus of shards" in fails(capsys, "translate", "--model", saved[0], "--ray", "Two.")
