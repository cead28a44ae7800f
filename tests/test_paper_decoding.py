"""§6.1 decoding (beam 4, GNMT length penalty alpha 0.6, at most source length + 50): checked against a
reference beam search written out here, one sentence at a time, full forward passes, no cache, no early stop."""

import itertools
import math

import pytest
import torch
from reference_search import model_for, reference_beam_search, reference_greedy
from tiny_models import random_batch
from transformers import GenerationMixin


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_greedy_equals_the_reference_greedy_decoding(alpha):
    model = model_for(vocab_size=12)
    lengths = [6, 2, 4]
    source, mask = random_batch(3, 6, 12, lengths)
    out = model.generate(
        source, attention_mask=mask, num_beams=1, length_penalty=alpha, max_new_tokens=9, return_dict_in_generate=True
    )
    for row, n in enumerate(lengths):
        [(score, tokens)] = reference_greedy(model, source[row, :n], alpha, limit=9)
        assert (
            out.sequences[row, 1 : 1 + len(tokens)].tolist() == tokens
            and (out.sequences[row, 1 + len(tokens) :] == 0).all()
        )
        assert out.sequences_scores[row].item() == pytest.approx(score, rel=1e-6)


@pytest.mark.parametrize(
    "k, alpha, returned, limit",
    [(4, 0.6, 1, 9), (4, 0.6, 4, 9), (3, 1.0, 2, 9), (2, 0.6, 1, 9), (4, 0.0, 1, 9), (4, 1.0, 1, 16), (4, 0.6, 4, 16)],
)
def test_hypotheses_and_scores_equal_the_reference_beam_search(k, alpha, returned, limit):
    """The search stops a sentence early once no live beam can beat what it returns; the reference never stops
    early, so equal results show the stop rule exact (a longer limit gives it more to skip)."""
    model = model_for(vocab_size=12)  # a small vocabulary makes eos likely, so hypotheses finish at many lengths
    lengths = [6, 2, 4]
    source, mask = random_batch(3, 6, 12, lengths)
    out = model.generate(
        source,
        attention_mask=mask,
        num_beams=k,
        length_penalty=alpha,
        num_return_sequences=returned,
        max_new_tokens=limit,
        return_dict_in_generate=True,
    )
    assert out.sequences.shape[0] == out.sequences_scores.shape[0] == 3 * returned
    for row, n in enumerate(lengths):
        expected = reference_beam_search(model, source[row, :n], k, alpha, limit=limit)[:returned]
        assert len(expected) == returned
        for j, (score, tokens) in enumerate(expected):
            got = out.sequences[row * returned + j]
            assert got[0] == model.config.decoder_start_token_id
            assert got[1 : 1 + len(tokens)].tolist() == tokens and (got[1 + len(tokens) :] == 0).all()
            assert out.sequences_scores[row * returned + j].item() == pytest.approx(score, rel=1e-6)


def test_no_output_is_longer_than_its_source_plus_50():
    model = model_for()
    eos = model.config.eos_token_id
    model.lm_head.register_forward_hook(lambda module, args, out: out.index_fill(-1, torch.tensor([eos]), -1e4))
    lengths = [7, 3, 1]
    source, mask = random_batch(3, 7, 40, lengths)
    out = model.generate(source, attention_mask=mask, num_beams=2)  # no max_new_tokens: the paper's limit
    for row, n in enumerate(lengths):
        generated = out[row, 1:]
        generated = generated[generated != 0]
        assert len(generated) == n + 50 and generated[-1] == eos  # it never chose eos: stopped at the limit


def test_defaults_are_the_papers_and_one_argument_switches_back():
    model = model_for()
    assert (model.generation_config.num_beams, model.generation_config.length_penalty, model.config.paper_decoding) == (
        4,
        0.6,
        True,
    )
    source, mask = random_batch(2, 5, 40)
    kwargs = dict(attention_mask=mask, max_new_tokens=6)
    transformers_own = GenerationMixin.generate(model, source, **kwargs)
    assert torch.equal(model.generate(source, paper_decoding=False, **kwargs), transformers_own)
    model.config.paper_decoding = False
    assert torch.equal(model.generate(source, **kwargs), transformers_own)


def test_a_padded_batch_decodes_like_each_sentence_alone():
    model = model_for()
    lengths = [8, 3, 5]
    source, mask = random_batch(3, 8, 40, lengths)
    batched = model.generate(source, attention_mask=mask, max_new_tokens=7)
    for row, n in enumerate(lengths):
        alone = model.generate(source[row : row + 1, :n], max_new_tokens=7)[0]
        assert torch.equal(batched[row, : len(alone)], alone) and (batched[row, len(alone) :] == 0).all()


@pytest.mark.parametrize("attn_implementation", ["eager", "flex_attention"])
def test_the_search_is_the_same_whichever_attention_kernel_the_model_is_configured_with(
    attn_implementation, monkeypatch
):
    """With sdpa (the default, checked against the reference search above) and eager, the beams of a sentence fold
    and the search cache computes each step's attention itself; with other kernels (flex here, flash on GPUs) the
    encoder output is repeated per beam and the model's own attention path runs. Same hypotheses and scores."""
    if attn_implementation == "flex_attention":
        pytest.importorskip("torch.nn.attention.flex_attention")
        import transformers.integrations.flex_attention as flex
        from torch.nn.attention.flex_attention import flex_attention

        # uncompiled, as in test_generation.py: torch.compile's CPU code generation fails for these kernels
        uncompiled = lambda query, key, value, training=False, **kwargs: flex_attention(query, key, value, **kwargs)
        monkeypatch.setattr(flex, "compile_friendly_flex_attention", uncompiled)
    reference, model = model_for(), model_for()
    model.config._attn_implementation = attn_implementation
    source, mask = random_batch(3, 8, 40, [8, 3, 5])
    kwargs = dict(attention_mask=mask, num_beams=4, num_return_sequences=2, max_new_tokens=9)
    expected = reference.generate(source, return_dict_in_generate=True, **kwargs)
    actual = model.generate(source, return_dict_in_generate=True, **kwargs)
    assert torch.equal(actual.sequences, expected.sequences)
    torch.testing.assert_close(actual.sequences_scores, expected.sequences_scores, rtol=1e-9, atol=0)


def test_bad_arguments():
    model = model_for()
    source, _ = random_batch(1, 4, 40)
    with pytest.raises(ValueError, match="num_return_sequences"):
        model.generate(source, num_return_sequences=5)


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts the calls that make the host wait for the device: reading values (item, tolist, bool, int, ...),
    copies to the CPU, and the data-dependent shapes of nonzero and boolean-mask indexing."""

    READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.nonzero, torch.nonzero,
             torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
             torch.masked_select, torch.Tensor.masked_select}  # fmt: skip

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        boolean_index = func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool
            for i in (args[1] if isinstance(args[1], tuple) else (args[1],))
        )
        self.count += func in self.READS or boolean_index
        return func(*args, **kwargs)


@pytest.mark.parametrize("every, graphs", [(1, False), (4, False), (4, True)])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_one_host_read_per_step(num_beams, every, graphs, monkeypatch):
    """One read a step on the CPU; on an accelerator (`done_check_interval`: every 4 steps) one every 4 steps; with
    the static steps a CUDA graph replays (`cuda_graphs`), no more (a read could not be captured)."""
    monkeypatch.setattr("aayn.model.search_aayn.done_check_interval", lambda device: every)
    model = model_for()
    reads, steps = HostReads(), []

    def no_eos(module, args, out):  # after each decoder step; no hook on the decoder, so later steps run plainly
        steps.append(reads.count)
        return out.index_fill(-1, torch.tensor([2]), -1e4)

    model.lm_head.register_forward_hook(no_eos)
    source, mask = random_batch(3, 7, 40, [7, 3, 5])
    with reads:
        model.generate(source, attention_mask=mask, num_beams=num_beams, max_new_tokens=12, cuda_graphs=graphs)
    assert len(steps) == 12  # eos never wins: every sentence runs to its limit
    per_step = [after - before for before, after in itertools.pairwise(steps)]
    # the decision of steps 1-11 (the decoder step itself reads nothing)
    assert per_step == [int(step % every == 0) for step in range(1, 12)], per_step
    assert reads.count - len(steps) <= 5  # before the loop (limits, the encoder, the mask) and after it


def test_encoder_keys_and_values_are_kept_once_per_sentence_not_per_beam(monkeypatch):
    """Every step's layers (the first through `forward`, the rest through `step`) read one row of encoder keys a
    sentence for four rows of beams. Mutation caught: the folded cache keeping the encoder's keys per beam
    (`repeat_interleave` before the cache)."""
    from aayn.model.modeling_aayn import AaynDecoder

    model = model_for()
    source, mask = random_batch(3, 7, 40, [7, 3, 5])
    rows = []
    layers_forward = AaynDecoder.layers_forward

    def recorded(self, hidden_states, masks, encoder_hidden_states, cache, implementation):
        output = layers_forward(self, hidden_states, masks, encoder_hidden_states, cache, implementation)
        rows.append((cache.encoded.keys[0].shape[0], cache.padding_bias.shape[0], hidden_states.shape[0]))
        return output

    monkeypatch.setattr(AaynDecoder, "layers_forward", recorded)
    model.generate(source, attention_mask=mask, num_beams=4, max_new_tokens=5)
    assert len(rows) >= 5 and all(keys == sentences and beams == 4 * sentences for keys, sentences, beams in rows)


def test_the_search_cache_holds_what_transformers_dynamic_cache_holds():
    """In-place, growing buffers (aayn) against transformers' DynamicCache (cat per step): the same keys and values
    after every update, beam reorder (rows repeated and dropped) and removal of finished sentences' rows."""
    from transformers.cache_utils import DynamicCache

    from aayn.model.cache_aayn import SearchCache

    generator = torch.Generator().manual_seed(0)
    ours, reference = SearchCache(limit=42).keys_values, DynamicCache()
    rows = 6
    for step in range(40):
        length = 3 if step == 0 else 1
        for layer in range(2):
            key, value = torch.randn(2, rows, 2, length, 4, generator=generator)
            for got, want in zip(ours.update(key, value, layer), reference.update(key, value, layer)):
                assert torch.equal(got, want)
        assert ours.get_seq_length() == reference.get_seq_length() == step + 3
        if step % 3 == 1:  # beams live on: some rows twice, some not at all
            order = torch.randint(rows, (rows,), generator=generator)
        elif step == 20:  # two sentences (of two rows each) leave the search
            order = torch.tensor([0, 1, 4, 5]) if rows == 6 else torch.arange(rows)
        else:
            continue
        ours.reorder_cache(order)
        reference.reorder_cache(order)
        rows = order.shape[0]
    with pytest.raises(ValueError, match="holds 42 positions"):
        ours.update(torch.zeros(rows, 2, 1, 4), torch.zeros(rows, 2, 1, 4), 0)


def test_the_folded_cache_attends_as_each_beam_would_over_its_own_history():
    """The model's attention over FoldedSearchCache, which never moves a key when beams are reordered and keeps
    the encoder's keys once per sentence. Reference: each beam's own list of keys and values (copied as beams
    branch) and its sentence's encoder output, attention softmax(q K^T / sqrt(d_k)) V written out per beam and
    head. 40 steps (past the first buffer capacity of 32 positions), random parents, a padded source, two
    sentences leaving at step 20; eager and SDPA kernels."""
    for implementation in ("eager", "sdpa"):
        model = model_for()
        model.config._attn_implementation = implementation
        check_folded_cache(model)


def check_folded_cache(model):
    from aayn.model.cache_aayn import FoldedSearchCache

    layer = model.model.decoder.layers[0]
    heads, head_dim, d = layer.self_attn.num_heads, layer.self_attn.head_dim, model.config.d_model
    generator = torch.Generator().manual_seed(0)
    n, k, length = 4, 3, 5
    encoder = torch.randn(n, length, d, generator=generator, dtype=torch.float64)
    padding = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]])
    cache = FoldedSearchCache(limit=45, beams=k, encoder_padding=padding, dtype=torch.float64)
    sentences = list(range(n))  # original index of each sentence still searched
    paths = [[] for _ in range(n * k)]  # per beam: its (key, value) per position, each (heads, head_dim)

    def attention(module, query, keys, values, mask=None):
        scores = torch.einsum("hd,thd->ht", query, keys) / head_dim**0.5
        if mask is not None:
            scores = scores.masked_fill(~mask.bool()[None], -math.inf)
        return module.out_proj(torch.einsum("ht,thd->hd", scores.softmax(-1), values).reshape(d))

    with torch.no_grad():
        for step in range(40):
            hidden = torch.randn(len(sentences) * k, 1, d, generator=generator, dtype=torch.float64)
            folded, self_mask, cross_mask = cache.layout(hidden)  # what the decoder asks of the cache
            got_self = layer.self_attn(folded, self_mask, cache=cache)[0].reshape(-1, d)
            got_cross = layer.encoder_attn(folded, cross_mask, key_value_states=encoder[sentences], cache=cache)[0]
            got_cross = got_cross.reshape(-1, d)
            query, key, value = (
                x.view(-1, heads, head_dim) for x in layer.self_attn.qkv_proj(hidden[:, 0]).chunk(3, -1)
            )
            cross_query = layer.encoder_attn.q_proj(hidden[:, 0]).view(-1, heads, head_dim)
            for row in range(len(sentences) * k):
                paths[row].append((key[row], value[row]))
                keys, values = (torch.stack(x) for x in zip(*paths[row]))
                expected = attention(layer.self_attn, query[row], keys, values)
                torch.testing.assert_close(got_self[row], expected, rtol=0, atol=1e-12)
                sentence = sentences[row // k]
                cross_keys, cross_values = (
                    x.view(length, heads, head_dim) for x in layer.encoder_attn.kv_proj(encoder[sentence]).chunk(2, -1)
                )
                expected = attention(layer.encoder_attn, cross_query[row], cross_keys, cross_values, padding[sentence])
                torch.testing.assert_close(got_cross[row], expected, rtol=0, atol=1e-12)
            assert cache.encoded.keys[0].shape[0] == len(sentences)  # once per sentence
            parents = torch.randint(k, (len(sentences), k), generator=generator)
            paths = [list(paths[s * k + int(p)]) for s in range(len(sentences)) for p in parents[s]]
            keep = None
            if step == 20:  # the second and fourth sentences leave the search
                keep = torch.tensor([0, 2])
                sentences = [sentences[i] for i in keep]
                paths = [paths[i * k + b] for i in keep.tolist() for b in range(k)]
            cache.next_step(parents, keep)
            assert cache.past_length() == step + 1


def test_a_sentence_done_between_checks_keeps_the_hypotheses_it_was_done_with(monkeypatch):
    """On an accelerator done sentences stay in the batch until the next check (every 4 steps); their finished
    hypotheses must stay as they were when they were done, though their beams go on: with early_stopping=True and a
    strong length reward (alpha 2) a later, longer hypothesis would beat them. The same outputs as checked every
    step, and the same alignments (the attention each kept hypothesis's tokens were chosen with)."""
    from scripts.record_search import model as recorded_model

    model, outputs = recorded_model(0), []
    torch.manual_seed(3)
    source, mask = random_batch(16, 9, 14, [9, 3, 7, 5, 8, 2, 6, 4] * 2)
    for every in (1, 4):
        monkeypatch.setattr("aayn.model.search_aayn.done_check_interval", lambda device, every=every: every)
        with torch.no_grad():
            outputs.append(model.generate(source, attention_mask=mask, num_beams=2, early_stopping=True,
                                          length_penalty=2.0, max_new_tokens=16, num_return_sequences=2,
                                          return_dict_in_generate=True, output_alignments=True))  # fmt: skip
    assert outputs[0].sequences.tolist() == outputs[1].sequences.tolist()
    torch.testing.assert_close(outputs[0].alignments, outputs[1].alignments)
    torch.testing.assert_close(outputs[0].sequences_scores, outputs[1].sequences_scores, rtol=1e-9, atol=1e-9)
