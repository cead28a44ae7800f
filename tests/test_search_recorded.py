"""The search's outputs stay as recorded: every option it serves, on fixed float64 models and inputs, against
tests/data/search_recorded.json (tests/scripts/record_search.py writes it). Tokens exactly, scores to 1e-10: a
change of structure must leave every output bit for bit, and a change of behaviour must be recorded again on
purpose."""

import json
from pathlib import Path

import pytest
import torch
from graph_replay import replay_graphs_on_the_cpu
from scripts.record_search import CASES, decode

RECORDED = json.loads((Path(__file__).parent / "data" / "search_recorded.json").read_text())


@pytest.mark.parametrize(
    "every, graphs", [(None, False), (3, False), (3, "eager"), (3, "replayed")],
    ids=["", "checked every 3 steps", "static steps (cuda_graphs) checked every 3", "static steps replayed"],
)  # fmt: skip
@pytest.mark.parametrize("name, options", CASES, ids=[name for name, _ in CASES])
def test_the_search_decodes_as_recorded(name, options, every, graphs, monkeypatch):
    """`every`: done sentences read back every 3 steps (`done_check_interval`, as on an accelerator), so they stay
    in the batch a few steps after they are done: the same outputs. `graphs`: the decoder's steps after the first
    with the static shapes a CUDA graph replays (`cuda_graphs=True`; run eagerly on the CPU): every slot up to the
    limit attended (those not yet written masked), done sentences' rows kept and computed until half the rows are
    done, then the graph's rows cut to the live ones: the same outputs; "replayed": those steps captured and
    replayed as CUDA replays a graph (`graph_replay.ReplayedGraph`: the captured calls run again on the same
    memory, so a value the step took from the host at capture would go stale): the same outputs."""
    if every is not None:
        monkeypatch.setattr("aayn.model.search_aayn.done_check_interval", lambda device: every)
    made = []  # the static steps' takeovers, one per model and search
    if graphs:
        from aayn.model.graph_aayn import GraphedSteps

        options, start = {**options, "cuda_graphs": True}, GraphedSteps.__init__
        monkeypatch.setattr(GraphedSteps, "__init__", lambda self, *args: made.append(self) or start(self, *args))
    graphs_made = replay_graphs_on_the_cpu(monkeypatch) if graphs == "replayed" else None
    if options.get("_attn") == "flex_attention":
        pytest.importorskip("torch.nn.attention.flex_attention")
        import transformers.integrations.flex_attention as flex
        from torch.nn.attention.flex_attention import flex_attention

        # uncompiled, as in test_generation.py: torch.compile's CPU code generation fails for these kernels
        uncompiled = lambda query, key, value, training=False, **kwargs: flex_attention(query, key, value, **kwargs)
        monkeypatch.setattr(flex, "compile_friendly_flex_attention", uncompiled)
    with torch.no_grad():
        actual = decode(options)
    expected = RECORDED[name]
    plain = options.get("_attn") != "flex_attention" and options.get("use_cache", True)  # where the steps fold
    assert bool(made) == bool(graphs and plain), made
    if graphs_made is not None and plain:  # every step after the first replayed (none fell back to eager)
        assert all(steps.captured for steps in made) and graphs_made
        assert sum(graph.replays for graph in graphs_made) > len(graphs_made)  # graphs replayed more than once
    assert actual.keys() == expected.keys()
    assert actual["sequences"] == expected["sequences"]
    for key in expected.keys() - {"sequences"}:
        torch.testing.assert_close(torch.tensor(actual[key]), torch.tensor(expected[key]), rtol=1e-10, atol=1e-10)
