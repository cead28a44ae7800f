"""generate() off the default path: every token kept, every option in force honoured by the paper's search (against
transformers' own search and the reference beam search of test_paper_decoding.py) or handed to transformers' search
with one warning and §6.1's limit, and invalid values refused as transformers refuses them."""

import math

import pytest
import torch
from reference_search import model_for, reference_beam_search
from tiny_models import random_batch
from transformers import GenerationMixin

import aayn.model.generation_aayn as generation

pytestmark = pytest.mark.both_lines  # can differ between the transformers lines (tests/README.md)


def tokens_until_eos(row: torch.Tensor, eos: int) -> list[int]:
    """The generated tokens of one output row (after the start token), up to and including eos."""
    tokens = row[1:].tolist()
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def transformers_greedy(model, source, mask, limit, **options):
    """transformers' own greedy search with the same options; pad suppressed, as the paper's search never picks it."""
    pad = model.config.pad_token_id
    return GenerationMixin.generate(
        model, source, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=limit,
        suppress_tokens=[pad], **options,
    )  # fmt: skip


def assert_same_greedy(ours, theirs, eos, limit):
    """Row by row: the same tokens; where transformers' search ran to the limit, ours ends there with eos."""
    for mine, reference in zip(ours, theirs):
        expected = tokens_until_eos(reference, eos)
        got = tokens_until_eos(mine, eos)
        if expected[-1] == eos:
            assert got == expected
        else:
            assert got[: limit - 1] == expected[: limit - 1] and got[-1] == eos and len(got) == limit


def forbidden_by(model, min_step=1, ngram=0, bad_words=()):
    """The words a hypothesis may not take next, as transformers' logits processors define them, written out."""
    start, eos = model.config.decoder_start_token_id, model.config.eos_token_id

    def banned(tokens, step):
        seq, out = [start, *tokens], set()
        if step < min_step:
            out.add(eos)
        for words in bad_words:
            prefix = list(words[:-1])
            if not prefix or seq[len(seq) - len(prefix) :] == prefix:
                out.add(words[-1])
        if ngram and len(seq) >= ngram:
            tail = seq[len(seq) - ngram + 1 :]
            out |= {seq[i + ngram - 1] for i in range(len(seq) - ngram + 1) if seq[i : i + ngram - 1] == tail}
        return out

    return banned


# 1. Outputs keep every token


def never_ending(model, favourite: int):
    """Make `favourite` the likeliest token at every step and eos never likely: hypotheses run to their limit."""
    eos = model.config.eos_token_id

    def hook(module, args, out):
        out = out.index_fill(-1, torch.tensor([eos]), -1e4)
        return out.index_fill(-1, torch.tensor([favourite]), 1e4)

    model.lm_head.register_forward_hook(hook)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_decoder_start_equal_to_pad_loses_no_token(num_beams):
    """Marian's convention (decoder_start_token_id == pad_token_id): the longest hypothesis keeps its last token."""
    model = model_for(decoder_start_token_id=0)  # pad is 0
    never_ending(model, 8)
    source, mask = random_batch(1, 5, 40)
    out = model.generate(source, attention_mask=mask, num_beams=num_beams, max_new_tokens=6)
    assert out[0].tolist() == [0, 8, 8, 8, 8, 8, model.config.eos_token_id]  # start, 5 tokens, eos at the limit
    theirs = GenerationMixin.generate(model, source, attention_mask=mask, num_beams=1, max_new_tokens=6)
    assert theirs.shape[1] == 7 and torch.equal(theirs[0, :6], out[0, :6])  # transformers' search keeps 7 too


@pytest.mark.parametrize("num_beams", [1, 3])
def test_the_search_never_chooses_pad(num_beams):
    """A model whose likeliest token is pad: fairseq masks pad, and every decoded token is returned."""
    model = model_for(vocab_size=12)
    never_ending(model, model.config.pad_token_id)
    source, mask = random_batch(2, 5, 12, [5, 3])
    out = model.generate(source, attention_mask=mask, num_beams=num_beams, max_new_tokens=6)
    assert out.shape == (2, 7)
    assert (out[:, 1:] != 0).all() and (out[:, -1] == model.config.eos_token_id).all()
    if num_beams == 1:
        assert_same_greedy(out, transformers_greedy(model, source, mask, 6), model.config.eos_token_id, 6)


def test_with_eos_equal_to_pad_the_mask_is_inferred_as_transformers_does():
    """eos == pad and no attention_mask: the source's eos is a token, not padding (a mask of ones)."""
    model = model_for(eos_token_id=0)  # pad is 0 too
    source = torch.tensor([[5, 9, 7, 0]])
    no_mask = model.generate(source, num_beams=2, max_new_tokens=5, return_dict_in_generate=True)
    ones = model.generate(source, attention_mask=torch.ones_like(source), num_beams=2, max_new_tokens=5,
                          return_dict_in_generate=True)  # fmt: skip
    without_eos = model.generate(source, attention_mask=torch.tensor([[1, 1, 1, 0]]), num_beams=2, max_new_tokens=5,
                                 return_dict_in_generate=True)  # fmt: skip
    assert torch.equal(no_mask.sequences, ones.sequences) and torch.equal(
        no_mask.sequences_scores, ones.sequences_scores
    )
    assert not torch.equal(no_mask.sequences_scores, without_eos.sequences_scores)


def test_a_float_or_bool_attention_mask_is_the_same_mask():
    model = model_for()
    source, mask = random_batch(2, 6, 40, [6, 3])
    expected = model.generate(source, attention_mask=mask, max_new_tokens=5)
    for other in (mask.float(), mask.bool()):
        assert torch.equal(model.generate(source, attention_mask=other, max_new_tokens=5), expected)


# 2. Every option honoured or refused


@pytest.mark.parametrize(
    "options",
    [
        dict(min_new_tokens=4),
        dict(min_length=5),
        dict(no_repeat_ngram_size=2),
        dict(bad_words_ids=[[7], [5, 6], [9, 9, 4]]),
        dict(no_repeat_ngram_size=3, min_new_tokens=2, bad_words_ids=[[8, 10]]),
    ],
)
def test_greedy_options_equal_transformers_own_greedy_search(options):
    model = model_for(vocab_size=12)
    source, mask = random_batch(4, 6, 12, [6, 2, 4, 5])
    ours = model.generate(source, attention_mask=mask, num_beams=1, max_new_tokens=12, **options)
    theirs = transformers_greedy(model, source, mask, 12, **options)
    assert_same_greedy(ours, theirs, model.config.eos_token_id, 12)


@pytest.mark.parametrize(
    "options, rules",
    [
        (dict(min_new_tokens=4), dict(min_step=5)),
        (dict(no_repeat_ngram_size=2), dict(ngram=2)),
        (dict(bad_words_ids=[[7], [5, 6]], min_length=3), dict(bad_words=[[7], [5, 6]], min_step=3)),
    ],
)
def test_beam_options_equal_the_reference_beam_search(options, rules):
    model = model_for(vocab_size=12)
    lengths = [6, 2, 4]
    source, mask = random_batch(3, 6, 12, lengths)
    out = model.generate(source, attention_mask=mask, num_beams=3, length_penalty=0.6, num_return_sequences=2,
                         max_new_tokens=9, return_dict_in_generate=True, **options)  # fmt: skip
    for row, n in enumerate(lengths):
        expected = reference_beam_search(model, source[row, :n], 3, 0.6, 9, banned=forbidden_by(model, **rules))[:2]
        for j, (score, tokens) in enumerate(expected):
            assert tokens_until_eos(out.sequences[row * 2 + j], model.config.eos_token_id) == tokens
            assert out.sequences_scores[row * 2 + j].item() == pytest.approx(score, rel=1e-6)


def test_the_generation_configs_values_count_as_if_passed():
    """Limits and options set in the model's generation config (as `aayn train` saves them) are honoured."""
    model = model_for(vocab_size=12)
    source, mask = random_batch(3, 6, 12, [6, 2, 4])
    expected = model.generate(source, attention_mask=mask, max_length=5, no_repeat_ngram_size=2, min_new_tokens=2)
    model.generation_config.max_length = 5
    model.generation_config.no_repeat_ngram_size = 2
    model.generation_config.min_new_tokens = 2
    assert torch.equal(model.generate(source, attention_mask=mask), expected)
    assert expected.shape[1] <= 5


def test_a_negative_alpha_keeps_the_exact_stopping_rule():
    """alpha < 0 makes lp shrink with length; stopping early still returns what running to the limit does."""
    model = model_for(vocab_size=12)
    lengths = [6, 2, 4]
    source, mask = random_batch(3, 6, 12, lengths)
    out = model.generate(source, attention_mask=mask, num_beams=4, length_penalty=-0.5, num_return_sequences=3,
                         max_new_tokens=12, return_dict_in_generate=True)  # fmt: skip
    for row, n in enumerate(lengths):
        expected = reference_beam_search(model, source[row, :n], 4, -0.5, 12)[:3]
        for j, (score, tokens) in enumerate(expected):
            assert tokens_until_eos(out.sequences[row * 3 + j], model.config.eos_token_id) == tokens
            assert out.sequences_scores[row * 3 + j].item() == pytest.approx(score, rel=1e-6)


def test_early_stopping_true_stops_at_k_finished_hypotheses():
    model = model_for(vocab_size=12)
    lengths = [6, 2, 4]
    source, mask = random_batch(3, 6, 12, lengths)
    out = model.generate(source, attention_mask=mask, num_beams=3, length_penalty=1.0, early_stopping=True,
                         max_new_tokens=12, return_dict_in_generate=True)  # fmt: skip
    never = model.generate(source, attention_mask=mask, num_beams=3, length_penalty=1.0, early_stopping="never",
                           max_new_tokens=12, return_dict_in_generate=True)  # fmt: skip
    default = model.generate(source, attention_mask=mask, num_beams=3, length_penalty=1.0, max_new_tokens=12,
                             return_dict_in_generate=True)  # fmt: skip
    assert torch.equal(never.sequences, default.sequences)
    for row, n in enumerate(lengths):
        [(score, tokens)] = reference_beam_search(model, source[row, :n], 3, 1.0, 12, stop_at_k_finished=True)[:1]
        assert tokens_until_eos(out.sequences[row], model.config.eos_token_id) == tokens
        assert out.sequences_scores[row].item() == pytest.approx(score, rel=1e-6)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_use_cache_false_decodes_the_same_without_a_cache(num_beams):
    model = model_for()
    source, mask = random_batch(3, 7, 40, [7, 3, 5])
    caches = []
    model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: caches.append(kwargs.get("past_key_values")), with_kwargs=True
    )
    kwargs = dict(attention_mask=mask, num_beams=num_beams, max_new_tokens=8, return_dict_in_generate=True)
    cached = model.generate(source, **kwargs)
    assert all(cache is not None for cache in caches)
    caches.clear()
    uncached = model.generate(source, use_cache=False, **kwargs)
    assert caches and all(cache is None for cache in caches)
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, rtol=1e-9, atol=0)


def test_attentions_hidden_states_and_scores_of_the_returned_hypotheses():
    """Asking for them does not change the search (it changed the translation before); scores and attentions are
    those of the returned hypotheses, step by step, in transformers' layout."""
    model = model_for()
    config = model.config
    source, mask = random_batch(2, 6, 40, [6, 3])
    plain = model.generate(source, attention_mask=mask, max_new_tokens=7, return_dict_in_generate=True)
    out = model.generate(source, attention_mask=mask, max_new_tokens=7, return_dict_in_generate=True,
                         output_attentions=True, output_hidden_states=True, output_scores=True)  # fmt: skip
    assert torch.equal(out.sequences, plain.sequences)
    steps = out.sequences.shape[1] - 1
    assert len(out.scores) == len(out.decoder_attentions) == len(out.cross_attentions) == steps
    assert len(out.decoder_attentions[0]) == config.decoder_layers
    assert out.decoder_attentions[2][0].shape == (2, config.decoder_attention_heads, 1, 3)
    assert out.cross_attentions[2][0].shape == (2, config.decoder_attention_heads, 1, 6)
    assert (out.cross_attentions[0][0][1, :, :, 3:] == 0).all()  # padding of the second source
    assert len(out.decoder_hidden_states[0]) == config.decoder_layers + 1
    for row in range(2):  # the step scores of the chosen tokens add up to the hypothesis' score
        tokens = tokens_until_eos(out.sequences[row], config.eos_token_id)
        log_p = sum(out.scores[t][row, w].item() for t, w in enumerate(tokens))
        assert log_p / ((5 + len(tokens)) / 6) ** 0.6 == pytest.approx(out.sequences_scores[row].item(), rel=1e-6)


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(num_beams=0), "num_beams"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(max_new_tokens=-3), "max_new_tokens"),
        (dict(length_penalty=math.nan), "length_penalty"),
        (dict(length_penalty=math.inf), "length_penalty"),
        (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
        (dict(min_new_tokens=-2), "min_new_tokens"),
        (dict(bad_words_ids=[[]]), "bad_words_ids"),
        (dict(bad_words_ids=[[2]]), "bad_words_ids"),
        (dict(bad_words_ids=[[4000]]), "bad_words_ids"),
        (dict(early_stopping="sometimes"), "early_stopping"),
        (dict(cuda_graphs="yes"), "`cuda_graphs` must be True or False"),
        (dict(cuda_graphs=True, do_sample=True), "cuda_graphs need the paper's search: not with"),
        (dict(cuda_graphs=True, paper_decoding=False), "cuda_graphs need the paper's search: not with paper_dec"),
        (dict(compiled_steps=1), "`compiled_steps` must be True or False"),
        (dict(compiled_steps=True, do_sample=True), "compiled_steps need the paper's search: not with"),
    ],
)
def test_invalid_values_raise_value_error(bad, message):
    model = model_for()
    source, _ = random_batch(1, 4, 40)
    with pytest.raises(ValueError, match=message):
        model.generate(source, **bad)


def warnings_of(monkeypatch) -> list[str]:
    said = []
    monkeypatch.setattr(generation.logger, "warning_once", lambda message: said.append(message))
    return said


def test_an_option_the_paper_search_cannot_serve_goes_to_transformers_with_one_warning_and_the_limit(monkeypatch):
    said = warnings_of(monkeypatch)
    model = model_for()
    never_ending(model, 8)
    source, mask = random_batch(2, 5, 40, [5, 2])
    out = model.generate(source, attention_mask=mask, num_beams=2, repetition_penalty=1.3)
    assert len(said) == 1 and "repetition_penalty" in said[0] and "limit" in said[0]
    assert out.shape[1] == 1 + 5 + 50  # §6.1's limit for the longest source, not transformers' max_length of 20
    theirs = GenerationMixin.generate(model, source, attention_mask=mask, num_beams=2, repetition_penalty=1.3,
                                      max_new_tokens=55)  # fmt: skip
    assert torch.equal(out, theirs)


def test_sampling_keeps_the_papers_limit_and_sampling_knobs_alone_are_ignored(monkeypatch):
    said = warnings_of(monkeypatch)
    model = model_for()
    never_ending(model, 8)
    source, mask = random_batch(1, 5, 40)
    assert model.generate(source, attention_mask=mask, do_sample=True, top_k=5).shape[1] == 1 + 5 + 50
    assert not said  # sampling is transformers' by choice: nothing to warn of
    model = model_for()
    plain = model.generate(source, attention_mask=mask, max_new_tokens=6)
    assert torch.equal(model.generate(source, attention_mask=mask, max_new_tokens=6, temperature=0.3), plain)
    assert len(said) == 1 and "temperature" in said[0]
