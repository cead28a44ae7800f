"""Lexically constrained decoding (`generate(constraints=...)`, constraints_aayn.py): the constraint states against
hand-worked cases, the search against a brute-force search over every output of a toy model, the property that
every output of a trained model holds its phrases, and the refusals."""

import itertools
import math
import random

import pytest
import torch
from reference_search import model_for

from aayn.model.constraints_aayn import OrderedState, UnorderedState


def advanced(state, tokens):
    for token in tokens:
        state = state.advance(token)
    return state


@pytest.mark.parametrize(
    ("phrases", "tokens", "bank", "met"),
    [
        ([[5, 6], [7]], [5], 1, False),
        ([[5, 6], [7]], [5, 8], 0, False),  # a phrase abandoned half-way gives its tokens back
        ([[5, 6], [7]], [5, 6, 8], 2, False),  # a finished phrase stays met
        ([[5, 6], [7]], [7, 9, 5, 6], 3, True),  # in any order
        ([[5], [5]], [5, 9], 1, False),  # a phrase given twice must appear twice
        ([[5], [5]], [5, 9, 5], 2, True),
        ([[5, 6], [5, 7]], [5, 6, 5, 7], 4, True),  # phrases sharing a prefix (the trie)
        ([[5, 6], [5, 7]], [5, 6, 5, 6], 2, False),  # [5, 6] twice counts once; the second 5 gives back
    ],
)
def test_unordered_states_count_the_tokens_of_phrases_met_or_under_way(phrases, tokens, bank, met):
    state = advanced(UnorderedState.start(phrases), tokens)
    assert (state.bank, state.met) == (bank, met)


@pytest.mark.parametrize(
    ("phrases", "tokens", "bank", "met"),
    [
        ([[5, 6], [7]], [7], 0, False),  # out of order: not counted
        ([[5, 6], [7]], [5, 6, 9, 9, 7], 3, True),  # anything between phrases
        ([[5, 6], [7]], [5, 8], 0, False),
        ([[5, 6], [7, 8]], [5, 6, 7, 9], 2, False),  # the second phrase abandoned: the first stays met
        ([[5, 6]], [5, 5, 6], 2, True),  # a phrase starting again on its first token
    ],
)
def test_ordered_states_follow_the_phrases_in_order(phrases, tokens, bank, met):
    state = advanced(OrderedState.start(phrases), tokens)
    assert (state.bank, state.met) == (bank, met)


# --- the search against a brute-force search: every output of a toy model (vocabulary 8, at most 5 tokens)


def contains(tokens: list[int], phrases: list[list[int]], ordered: bool) -> bool:
    """Whether `tokens` holds each phrase (its tokens in a row); ordered: one after the other, left to right."""
    at = 0
    for phrase in phrases:
        found = next((i for i in range(at if ordered else 0, len(tokens) - len(phrase) + 1)
                      if tokens[i : i + len(phrase)] == phrase), None)  # fmt: skip
        if found is None:
            return False
        at = found + len(phrase) if ordered else 0
    return True


@torch.no_grad()
def brute_force(model, source, phrases, alpha, limit, ordered):
    """The best output (tokens, eos last, and its score log P / lp) of all at most `limit` tokens long that hold
    `phrases`, scoring every one by full forward passes."""
    config = model.config
    eos, words = config.eos_token_id, [w for w in range(config.vocab_size) if w not in (config.pad_token_id, 2)]
    log_probs = {}  # prefix -> next-token log-probabilities
    for length in range(limit):
        prefixes = list(itertools.product(words, repeat=length))
        decoder = torch.tensor([[config.decoder_start_token_id, *p] for p in prefixes])
        logits = model(input_ids=source.expand(len(prefixes), -1), decoder_input_ids=decoder).logits[:, -1]
        for prefix, row in zip(prefixes, torch.log_softmax(logits.double(), -1)):
            log_probs[prefix] = row
    best = (-math.inf, None)
    for prefix, row in log_probs.items():
        if contains(list(prefix), phrases, ordered):
            total = row[eos].item() + sum(log_probs[prefix[:i]][w].item() for i, w in enumerate(prefix))
            best = max(best, (total / ((5 + len(prefix) + 1) / 6) ** alpha, [*prefix, eos]))
    return best


@pytest.mark.parametrize(
    ("phrases", "ordered", "alpha"),
    [
        ([[5]], False, 0.6),
        ([[6, 3], [7]], False, 0.6),
        ([[6, 3], [7]], True, 0.0),
        ([[7], [4, 5]], True, 1.0),
        ([[3, 4, 5, 6]], False, 0.6),  # a phrase as long as the limit allows (4 tokens + eos)
    ],
)
def test_the_search_with_enough_beams_finds_the_brute_force_best(phrases, ordered, alpha):
    """With more beams than candidates at any step (1,600 > 216 live prefixes x 7 words) nothing is dropped, so
    the search must return the best of all outputs that hold the phrases."""
    model = model_for(vocab_size=8)
    source = torch.tensor([[3, 4, 5, 6, 7, 2]])
    want_score, want_tokens = brute_force(model, source, phrases, alpha, 5, ordered)
    out = model.generate(
        source, num_beams=1600, max_new_tokens=5, length_penalty=alpha, constraints=[phrases],
        ordered_constraints=ordered, return_dict_in_generate=True,
    )  # fmt: skip
    tokens = [t for t in out.sequences[0, 1:].tolist() if t != model.config.pad_token_id]
    assert tokens == want_tokens
    assert out.sequences_scores[0].item() == pytest.approx(want_score, abs=1e-9)


def test_without_constraints_the_search_is_unchanged():
    model = model_for(vocab_size=40)
    source = torch.tensor([[5, 9, 12, 30, 2], [7, 7, 8, 2, 0]])
    plain = model.generate(source, num_beams=4, return_dict_in_generate=True)
    for none in (None, [[], []]):
        again = model.generate(source, num_beams=4, constraints=none, return_dict_in_generate=True)
        assert torch.equal(again.sequences, plain.sequences)
        assert torch.equal(again.sequences_scores, plain.sequences_scores)


def test_a_sentence_without_phrases_in_a_constrained_batch_decodes_as_alone():
    """Dynamic beam allocation with no phrase is plain beam search (candidates of equal score aside)."""
    model = model_for(vocab_size=40)
    source = torch.tensor([[5, 9, 12, 30, 2], [7, 7, 8, 2, 0]])
    plain = model.generate(source, num_beams=4, return_dict_in_generate=True)
    mixed = model.generate(source, num_beams=4, constraints=[[[11, 12]], []], return_dict_in_generate=True)
    unpadded = [[t for t in out.sequences[1].tolist() if t != model.config.pad_token_id] for out in (mixed, plain)]
    assert unpadded[0] == unpadded[1]
    assert mixed.sequences_scores[1] == plain.sequences_scores[1]
    assert contains(mixed.sequences[0].tolist(), [[11, 12]], False)


# --- every output of a trained model holds its phrases


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The fairseq fixture's tiny model, trained on Bible verses, imported: (model, tokenizer, 8 test verses)."""
    from fairseq_helpers import import_as_recorded
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder, record = import_as_recorded("postnorm-spm", tmp_path_factory.mktemp("constraints") / "spm")
    texts = record["interactive"]["source_texts"][:8]
    return AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder), texts


@pytest.mark.parametrize(("ordered", "beams", "returned"), [(False, 4, 2), (True, 4, 1), (False, 1, 1)])
def test_every_output_holds_its_random_phrases(trained, ordered, beams, returned):
    model, tokenizer, texts = trained
    rng = random.Random(7 + beams + ordered)
    words = [i for i in range(len(tokenizer)) if i not in tokenizer.all_special_ids]
    phrases = [[[rng.choice(words) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 3))]
               for _ in texts]  # fmt: skip
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    out = model.generate(**inputs, num_beams=beams, num_return_sequences=returned, constraints=phrases,
                         ordered_constraints=ordered, return_dict_in_generate=True)  # fmt: skip
    scores = out.sequences_scores.view(len(texts), returned)
    assert torch.isfinite(scores[:, 0]).all()  # every sentence has an output that holds its phrases
    for row, tokens in enumerate(out.sequences.tolist()):  # every output does (fewer than asked may: -inf)
        if math.isfinite(out.sequences_scores[row]):
            assert contains(tokens, phrases[row // returned], ordered), (row, phrases[row // returned])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"do_sample": True}, "constraints need the paper's search: not with"),
        ({"paper_decoding": False}, "constraints need the paper's search: not with paper_decoding=False"),
        ({"constraints": [[[5]]]}, "`constraints` has 1 lists of phrases for 2 input sentences"),
        ({"constraints": [[[5]], [[40]]]}, "constraint [40] of sentence 1: a phrase is a non-empty list"),
        ({"constraints": [[[5, 2]], []]}, "without eos (2) or pad (0)"),
        ({"constraints": [[[]], []]}, "constraint [] of sentence 0"),
        ({"constraints": [[[5] * 10], []], "max_new_tokens": 8}, "the constraints of sentence 0 hold 10 tokens"),
        ({"constraints": [[5], []]}, "one list of phrases (lists of token ids) per input sentence"),
        ({"ordered_constraints": "yes"}, "`ordered_constraints` must be True or False"),
        ({"decoder_input_ids": torch.tensor([[1, 5], [1, 6]])}, "constraints and a target prefix"),
    ],
)
def test_what_constraints_cannot_do_is_refused_in_one_line(options, message):
    model = model_for(vocab_size=40)
    source = torch.tensor([[5, 9, 12, 30, 2], [7, 7, 8, 2, 0]])
    options = {"constraints": [[[5]], [[6]]], **options}
    with pytest.raises(ValueError, match=None) as caught:
        model.generate(source, num_beams=2, **options)
    assert message in str(caught.value)
