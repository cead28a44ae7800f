"""Word alignments (alignment.py): kept by the search as it chooses each token, against a full-sequence forward over
its outputs; against `fairseq-interactive --print-alignment` on the imported fixtures (recorded
by tests/scripts/make_fairseq_fixtures.py), the CTranslate2 export's `return_attention`, a hand-worked case, the
command line's forms, and the alignment error rate's code on a hand-computed case."""

import json
from pathlib import Path

import pytest
import torch
from tiny_models import random_batch, tiny_config

from aayn import AaynForConditionalGeneration
from aayn.formats.alignment import AlignmentSettings, hard_links

FIXTURES = Path(__file__).parent / "data" / "fairseq"
KINDS = ["postnorm-spm", "prenorm-moses-bpe"]


@pytest.fixture(scope="module", params=KINDS)
def imported(request, tmp_path_factory):
    from fairseq_helpers import import_as_recorded

    return import_as_recorded(request.param, tmp_path_factory.mktemp("aligned") / request.param)


def test_hard_links_take_the_argmax_of_the_tokens_that_are_not_special():
    eos, pad = 2, 0
    attention = [[0.1, 0.5, 0.4, 0.0], [0.3, 0.1, 0.2, 0.9], [0.2, 0.2, 0.6, 0.0]]  # 3 target rows, 4 source columns
    # source: 7 8 9 eos (eos's column ignored); target: 5 6 eos (eos's row ignored)
    assert hard_links(attention, [7, 8, 9, eos], [5, 6, eos], {eos, pad}) == [(1, 0, 0.5), (0, 1, 0.3)]
    assert hard_links(attention, [eos, 8, 9, eos], [5, pad, 6], {eos, pad}) == [(0, 0, 0.5), (1, 1, 0.6)]


def test_greedy_alignments_equal_fairseq_print_alignment(imported):
    """fairseq's `--print-alignment` (the last layer's attention averaged over all heads, argmax per target token,
    eos and pad left out) on its greedy outputs: the same pairs for every verse, on both fixtures."""
    from aayn.translation.opening import open_translator

    folder, record = imported
    texts = record["interactive"]["source_texts"]
    rows = record["interactive_cli"]["aligned_greedy"]
    translator = open_translator([str(folder)])
    out = translator.nbest(texts, 1, num_beams=1, alignment=AlignmentSettings())
    assert [hypotheses[0][1] for hypotheses in out] == [row["D"] for row in rows]
    assert [hypotheses[0][2].pairs() for hypotheses in out] == [row["A"] for row in rows]
    # the teacher-forced alignment of the same pairs (`aayn score --print_alignment`) is the same (on verses whose
    # text tokenizes back to the tokens produced: not those cut at the limit in the middle of a word)
    scored = translator.score(texts[:3], [row["D"] for row in rows[:3]], alignment=AlignmentSettings())
    assert [pair.alignment.pairs() for pair in scored] == [row["A"] for row in rows[:3]]


def test_the_ctranslate2_export_gives_the_same_alignments(imported, tmp_path):
    """The export sets CTranslate2's alignment layer and heads to fairseq's (the last, all): `return_attention`'s
    argmax equals fairseq's pairs (one verse at a time: in a batch CTranslate2's limit is the longest source's)."""
    pytest.importorskip("ctranslate2")
    from aayn.formats import export_model
    from aayn.translation.opening import open_translator

    folder, record = imported
    exported = export_model(folder, tmp_path / "ct2", "ctranslate2")
    translator = open_translator([str(exported)], needs=("alignment",))
    texts = record["interactive"]["source_texts"][:8]
    for text, row in zip(texts, record["interactive_cli"]["aligned_greedy"]):
        hypothesis = translator.nbest([text], 1, num_beams=1, alignment=AlignmentSettings())[0][0]
        assert (hypothesis[1], hypothesis[2].pairs()) == (row["D"], row["A"])
    with pytest.raises(ValueError, match="aligns with the layer and heads it was exported with"):
        translator.nbest(texts[:1], 1, alignment=AlignmentSettings(layer=0))


def test_another_layer_and_fewer_heads_change_the_attention_read(imported):
    from aayn.formats.alignment import align_ids
    from aayn.translation.opening import open_translator

    folder, record = imported
    translator = open_translator([str(folder)])
    model, tokenizer = translator.model, translator.tokenizer
    source = tokenizer(record["interactive"]["source_texts"][:1])["input_ids"]
    target = tokenizer(text_target=record["interactive"]["greedy"][:1])["input_ids"]
    inputs = {"input_ids": torch.tensor(source), "decoder_input_ids": torch.tensor([[1, *target[0][:-1]]])}
    inputs["decoder_input_ids"][0, 0] = model.config.decoder_start_token_id
    with torch.no_grad():
        attention = model(**inputs, output_attentions=True).cross_attentions[0][0, :1].double().mean(0)
    special = {model.config.eos_token_id, model.config.pad_token_id}
    want = hard_links(attention.tolist(), source[0], target[0], special)
    got = align_ids(model, tokenizer, source, target, AlignmentSettings(layer=0, heads=1))[0].links
    assert [(i, j) for i, j, _ in got] == [(i, j) for i, j, _ in want]
    refused = [(AlignmentSettings(layer=2), "alignment_layer must be a decoder layer from 0 to 1"),
               (AlignmentSettings(heads=5), "alignment_heads must be from 1 to the layer's 4 heads")]  # fmt: skip
    for bad, message in refused:
        with pytest.raises(ValueError, match=message):
            align_ids(model, tokenizer, source, target, bad)


def test_the_command_line_prints_pairs_and_json(imported, capsys, tmp_path):
    from aayn.cli import main as aayn

    folder, record = imported
    texts = record["interactive"]["source_texts"][:2]
    rows = record["interactive_cli"]["aligned_greedy"][:2]
    assert aayn(["translate", "--model", str(folder), "--num_beams", "1", "--print_alignment", "hard", *texts]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{row['D']}\t{row['A']}" for row in rows]
    assert aayn(["translate", "--model", str(folder), "--num_beams", "1", "--print_alignment", "json", texts[0]]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["text"] == rows[0]["D"]
    assert " ".join(f"{i}-{j}" for i, j, _ in line["alignment"]) == rows[0]["A"]
    assert len(line["target_tokens"]) == len(line["alignment"]) and all(0 < w <= 1 for *_, w in line["alignment"])
    argv = ["translate", "--model", str(folder), "--num_beams", "1", "--nbest", "1"]
    argv += ["--print_alignment", "hard", texts[0]]
    assert aayn(argv) == 0
    assert capsys.readouterr().out.split("\t")[3].strip() == rows[0]["A"]
    (tmp_path / "src.txt").write_text(texts[0] + "\n")
    (tmp_path / "tgt.txt").write_text(rows[0]["D"] + "\n")
    argv = ["score", "--model", str(folder), "--source", str(tmp_path / "src.txt")]
    argv += ["--target", str(tmp_path / "tgt.txt")]
    assert aayn([*argv, "--print_alignment"]) == 0
    assert capsys.readouterr().out.strip().split("\t")[2] == rows[0]["A"]


def test_show_attention_draws_the_alignment(imported, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from aayn.cli import main as aayn

    folder, record = imported
    picture = tmp_path / "attention.png"
    text = record["interactive"]["source_texts"][0]
    argv = ["translate", "--model", str(folder), "--show_attention", str(picture), "--print_alignment", "hard", text]
    assert aayn(argv) == 0
    assert picture.stat().st_size > 1000


def test_the_alignment_error_rate_of_a_hand_computed_case():
    """AER = 1 - (|A & S| + |A & P|) / (|A| + |S|) (Och and Ney 2003), S within P: A = {1-1, 2-2, 3-4},
    S = {1-1, 2-3}, P = S + {2-2, 3-3}: |A & S| = 1, |A & P| = 2, so 1 - 3 / 5 = 0.4."""
    from aayn.formats.alignment import alignment_error_rate, read_gold

    sure, possible = read_gold(["1-1 2-3 2p2 3p3"])
    assert alignment_error_rate([{(1, 1), (2, 2), (3, 4)}], sure, possible) == pytest.approx(0.4)
    assert alignment_error_rate([{(1, 1), (2, 3)}], sure, possible) == 0.0


def _search_reference(model, ids, mask, sequences, returned: int, layer: int, heads: int):
    """The reference for the alignments kept by the search: each hypothesis run again as one teacher-forced
    sequence through the model's full forward with the eager kernel (no cache), its cross-attention averaged."""
    with torch.no_grad():
        out = model(
            input_ids=ids.repeat_interleave(returned, 0),
            attention_mask=mask.repeat_interleave(returned, 0),
            decoder_input_ids=sequences[:, :-1],
            output_attentions=True,
            use_cache=False,
        )
    return out.cross_attentions[layer][:, :heads].double().mean(1)


def _produced_lengths(sequences, eos: int) -> list[int]:
    lengths = []
    for row in sequences[:, 1:].tolist():
        lengths.append(row.index(eos) + 1 if eos in row else len(row))
    return lengths


@pytest.mark.parametrize(
    ("beams", "returned", "layer", "heads", "hooked"),
    [(1, 1, None, None, False), (4, 2, None, None, False), (3, 3, 0, 2, False), (4, 1, 1, 1, True)],
)
def test_the_search_keeps_the_attention_that_chose_each_token(beams, returned, layer, heads, hooked):
    """`generate(output_alignments=True)` keeps, as it searches (cached, folded beams, reordered every step), the
    attention of each chosen token: equal to the full-sequence forward's over the hypotheses it returns, on a
    padded batch, greedy and beam, any layer and head count; the translations are those of a search without it."""
    torch.manual_seed(7)
    model = AaynForConditionalGeneration(tiny_config(vocab_size=14)).eval()
    ids, mask = random_batch(3, 9, 14, lengths=[9, 5, 7])
    if hooked:  # a hook on a decoder module: the decoder's own forward runs every step, not `AaynDecoder.step`
        model.model.decoder.layers[0].register_forward_hook(lambda *_: None)
    # no max_new_tokens: the limits (source + 50) differ, so sentences leave the search at different steps
    options = dict(num_beams=beams, num_return_sequences=returned, return_dict_in_generate=True)
    plain = model.generate(ids, attention_mask=mask, **options)
    out = model.generate(
        ids, attention_mask=mask, **options, output_alignments=True, alignment_layer=layer, alignment_heads=heads
    )
    assert torch.equal(out.sequences, plain.sequences) and torch.equal(out.sequences_scores, plain.sequences_scores)
    chosen_layer = 1 if layer is None else layer
    reference = _search_reference(model, ids, mask, out.sequences, returned, chosen_layer, heads or 4)
    kept = out.alignments
    assert kept.shape == (3 * returned, out.sequences.shape[1] - 1, 9)
    rows_mask = mask.repeat_interleave(returned, 0).bool()
    lengths = _produced_lengths(out.sequences, model.config.eos_token_id)
    assert len(set(lengths[::returned])) == 3  # the sentences ended at three different steps
    for row, length in enumerate(lengths):
        got, want = kept[row, :length][:, rows_mask[row]], reference[row, :length][:, rows_mask[row]]
        torch.testing.assert_close(got.double(), want, atol=2e-6, rtol=0)
        assert torch.all(kept[row, :length][:, ~rows_mask[row]] == 0)  # padding gets no weight


def test_alignments_without_a_cache_and_of_an_ensemble():
    """Where the search cannot keep the attention (no cache) one teacher-forced forward gives the same; an ensemble
    aligns with its first model's attention."""
    from aayn import generate_ensemble

    torch.manual_seed(3)
    first, second = (AaynForConditionalGeneration(tiny_config(vocab_size=14)).eval() for _ in range(2))
    ids, mask = random_batch(2, 6, 14, lengths=[6, 4])
    options = dict(num_beams=3, max_new_tokens=6, return_dict_in_generate=True, output_alignments=True)
    cached = first.generate(ids, attention_mask=mask, **options)
    uncached = first.generate(ids, attention_mask=mask, **options, use_cache=False)
    assert torch.equal(cached.sequences, uncached.sequences)
    lengths = _produced_lengths(cached.sequences, first.config.eos_token_id)
    for row, length in enumerate(lengths):
        got, want = cached.alignments[row, :length], uncached.alignments[row, :length]
        torch.testing.assert_close(got, want, atol=2e-6, rtol=0)
    together = generate_ensemble([first, second], ids, mask, **options)
    reference = _search_reference(first, ids, mask, together.sequences, 1, 1, 4)
    for row, length in enumerate(_produced_lengths(together.sequences, first.config.eos_token_id)):
        got, want = together.alignments[row, :length][:, mask[row].bool()], reference[row, :length][:, mask[row].bool()]
        torch.testing.assert_close(got.double(), want, atol=2e-6, rtol=0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(output_alignments=True), "needs return_dict_in_generate=True"),
        (dict(output_alignments=True, return_dict_in_generate=True, do_sample=True), "need the paper's search"),
        (dict(output_alignments=True, return_dict_in_generate=True, paper_decoding=False), "need the paper's search"),
        (dict(output_alignments=True, return_dict_in_generate=True, alignment_layer=2), "alignment_layer must be"),
        (dict(output_alignments=True, return_dict_in_generate=True, alignment_heads=0), "alignment_heads must be"),
        (dict(alignment_layer=0), "choose the attention of output_alignments=True"),
        (dict(output_alignments="yes"), "`output_alignments` must be True or False"),
    ],
)
def test_what_alignments_cannot_do_is_refused_in_one_line(options, message):
    model = AaynForConditionalGeneration(tiny_config(vocab_size=14)).eval()
    ids, mask = random_batch(1, 4, 14)
    with pytest.raises(ValueError, match=message):
        model.generate(ids, attention_mask=mask, max_new_tokens=3, **options)
