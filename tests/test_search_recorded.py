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
        from aayn.formats.aayn.cuda_graphs import GraphedSteps

        options, start = {**options, "cuda_graphs": True}, GraphedSteps.__init__
        monkeypatch.setattr(GraphedSteps, "__init__", lambda self, *args: made.append(self) or start(self, *args))
    graphs_made = replay_graphs_on_the_cpu(monkeypatch) if graphs == "replayed" else None
    monkeypatch.setattr("aayn.formats.aayn.cuda_graphs.MIN_ROWS", 1)  # the four sentences' rows halved down to one
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


def test_a_models_graphs_are_replayed_by_its_later_batches(monkeypatch):
    """`cuda_graphs`' static steps are kept per size (rows, beams, positions, source length, rounded up:
    `cuda_graphs.bucket`) across a model's searches, captured and replayed as CUDA would (`ReplayedGraph`): a later
    batch of other sentences, lengths and limits within the same sizes replays the graphs an earlier one captured,
    its own state copied in, and decodes as the plain search does; weights changed in place are what a replay
    reads; a parameter replaced by another tensor has the graphs captured again."""
    from scripts.record_search import model as recorded_model

    from aayn.formats.aayn.cuda_graphs import kept_steps

    graphs = replay_graphs_on_the_cpu(monkeypatch)
    monkeypatch.setattr("aayn.model.search_aayn.done_check_interval", lambda device: 3)
    model, generator = recorded_model(0), torch.Generator().manual_seed(7)

    def batch(lengths: list[int], limit: int) -> set:
        """Decode with the kept graphs and plainly, compare; the keys of the graphs this batch captured."""
        ids = torch.randint(4, 14, (len(lengths), max(lengths)), generator=generator)
        mask = (torch.arange(ids.shape[1]) < torch.tensor(lengths)[:, None]).long()
        kwargs = dict(attention_mask=mask, num_beams=4, max_new_tokens=limit, return_dict_in_generate=True)
        made = len(graphs)
        with torch.no_grad():
            graphed, plain = (model.generate(ids * mask, cuda_graphs=flag, **kwargs) for flag in (True, False))
        assert graphed.sequences.tolist() == plain.sequences.tolist()
        torch.testing.assert_close(graphed.sequences_scores, plain.sequences_scores, rtol=1e-10, atol=1e-10)
        return {entry.key for entry in kept_steps(model).entries if entry.graph in graphs[made:]}

    lengths = [7, 2, 5, 3, 6, 4, 7, 1, 6, 5, 7, 2]
    first = batch(lengths, 10)  # 16 rows (12 sentences), 12 positions (10 steps), source 8 (7 tokens)
    assert {
        (16, 4, 12, 8, torch.float64, torch.float64, False, False),
        (8, 4, 12, 8, torch.float64, torch.float64, False, False),
    } <= first
    replays = sum(graph.replays for graph in graphs)
    for entry in kept_steps(model).entries:  # what a batch leaves in them (even an overflow's) is never read
        slots = entry.slots
        for buffer in [*slots.keys, *slots.values, *slots.cross_keys, *slots.cross_values]:
            buffer.fill_(float("nan"))
    again = batch([8, 6, 3, 8, 2, 5, 7, 1, 4, 8, 3], 11)  # other sentences of the same sizes
    assert not first & again and sum(graph.replays for graph in graphs[: len(first)]) > replays
    with torch.no_grad():
        model.get_decoder().layers[0].feed_forward.fc1.weight.mul_(1.5)  # in place: the graphs read the new values
    assert not batch(lengths, 10) & first
    model.get_decoder().layers[0].feed_forward.fc1.weight = torch.nn.Parameter(
        model.get_decoder().layers[0].feed_forward.fc1.weight * 0.5
    )
    assert (16, 4, 12, 8, torch.float64, torch.float64, False, False) in batch(lengths, 10)  # captured again


def test_kept_steps_are_apart_in_inference_mode_and_under_autocast(monkeypatch):
    """aayn's translators decode in `torch.inference_mode`, a user's `generate` in no_grad: each its own steps (a
    tensor made in inference mode cannot be written outside it); a graph captured under autocast (its casts baked
    in) is not replayed without it, nor one captured without it under autocast."""
    from scripts.record_search import inputs
    from scripts.record_search import model as recorded_model

    model, (ids, mask, _) = recorded_model(0).float(), inputs()
    decode = lambda: model.generate(ids, attention_mask=mask, num_beams=4, cuda_graphs=True).tolist()
    outputs = []
    for mode in (torch.inference_mode, torch.no_grad, torch.inference_mode):
        with mode():
            outputs.append(decode())
    assert outputs[0] == outputs[1] == outputs[2]
    replay_graphs_on_the_cpu(monkeypatch)
    scored = lambda: model.generate(ids, attention_mask=mask, num_beams=4, cuda_graphs=True,
                                    return_dict_in_generate=True).sequences_scores.tolist()  # fmt: skip
    with torch.no_grad():
        plain = scored()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = scored()
        assert low != plain  # autocast changes what a step computes: a graph replayed across would show
        assert scored() == plain
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert scored() == low


def test_the_kept_steps_are_few_free_before_taken_and_let_go_with_their_weights():
    """`StepGraphs.take`: a step of the key asked, never one another search holds; at most `limit` kept, and
    buffers within the budget, the least recently used free ones let go first; all let go once the weights'
    signature changes."""
    from aayn.formats.aayn.cuda_graphs import StepGraph, StepGraphs

    class Entry:
        free = StepGraph.free

        def __init__(self, key, size=1):
            self.key, self.owner, self.used, self.bytes = key, None, 0, size

    class Search:  # an owner
        pass

    kept, one, two, three = StepGraphs(), Search(), Search(), Search()
    kept.limit = 2
    take = lambda owner, key, size=1, signature="weights": kept.take(
        owner, key, signature, lambda: Entry(key, size), 10
    )
    first = take(one, "a")
    assert take(two, "a") is not first  # `one` holds it
    del one  # a search that ends lets its step go
    assert take(three, "a") is first
    del two, three  # both free; the second "a" used longer ago than `first`
    made = take(Search(), "b")
    assert kept.entries == [first, made]  # three kept: the least recently used free one let go
    big = take(Search(), "c", 9)
    assert kept.entries == [made, big]  # 11 bytes kept: `first` let go, 10 then
    held = Search()
    huge = take(held, "d", 20)
    assert kept.entries == [huge]  # held: kept, over the budget, until it is let go
    take(Search(), "a", signature="other weights")
    assert len(kept.entries) == 1 and kept.entries[0].key == "a"
