"""Ensembles inside the paper's search: each model with its own cache, the models' log-probabilities averaged at
each step. Checked against the brute-force search of test_paper_decoding over the averaged log-probabilities."""

import shutil
from types import SimpleNamespace

import pytest
import torch
from reference_search import reference_beam_search
from tiny_models import random_batch, tiny_config

from aayn import AaynForConditionalGeneration, generate_ensemble
from aayn.cli import main as aayn


def models(count: int, **overrides):
    out = []
    for seed in range(count):
        torch.manual_seed(seed)
        out.append(AaynForConditionalGeneration(tiny_config(**{"vocab_size": 12, **overrides})).double().eval())
    return out


class Averaged:
    """A stand-in model for the reference search: its "logits" are the ensemble's averaged log-probabilities,
    from full forward passes of each model."""

    def __init__(self, members, average):
        self.members, self.average, self.config = members, average, members[0].config

    def __call__(self, **inputs):
        each = torch.stack([torch.log_softmax(m(**inputs).logits.double(), -1) for m in self.members])
        if self.average == "probs":
            return SimpleNamespace(logits=torch.logsumexp(each, 0) - torch.log(torch.tensor(len(self.members))))
        return SimpleNamespace(logits=each.mean(0))


@pytest.mark.parametrize("average", ["log_probs", "probs"])
@pytest.mark.parametrize("k", [1, 3])
def test_an_ensemble_of_two_equals_the_reference_search_over_averaged_log_probabilities(average, k):
    members = models(2)
    members[1].config._attn_implementation = "eager"  # each model keeps its own kind of cache
    lengths = [6, 2, 4]
    source, mask = random_batch(3, 6, 12, lengths)
    out = generate_ensemble(members, source, attention_mask=mask, average=average, num_beams=k, length_penalty=0.6,
                            max_new_tokens=8, return_dict_in_generate=True)  # fmt: skip
    for row, n in enumerate(lengths):
        reference = Averaged(members, average)
        [(score, tokens)] = reference_beam_search(reference, source[row, :n], k, 0.6, 8, normalize=False)[:1]
        assert out.sequences[row, 1 : 1 + len(tokens)].tolist() == tokens
        assert out.sequences_scores[row].item() == pytest.approx(score, rel=1e-6)


def test_ensemble_members_must_share_a_vocabulary():
    with pytest.raises(ValueError, match="model 2 of the ensemble has vocab_size=13"):
        generate_ensemble([models(1)[0], models(1, vocab_size=13)[0]], torch.tensor([[5, 6, 2]]))
    with pytest.raises(ValueError, match="paper's search only"):
        generate_ensemble(models(2), torch.tensor([[5, 6, 2]]), do_sample=True)


def test_aayn_translate_with_several_models(saved, tmp_path, capsys):
    folder, _, tokenizer = saved
    flags = ["translate", "--max_new_tokens", "6", "six one eight", "two zero"]
    assert aayn([*flags, "--model", str(folder)]) == 0
    alone = capsys.readouterr().out
    assert aayn([*flags, "--model", str(folder), "--model", str(folder)]) == 0  # the same model twice: itself
    assert capsys.readouterr().out == alone
    aligned = [*flags, "--num_beams", "1", "--print_alignment", "hard"]  # the models' averaged attention aligns
    assert aayn([*aligned, "--model", str(folder)]) == 0
    alone = capsys.readouterr().out
    assert aayn([*aligned, "--model", str(folder), "--model", str(folder)]) == 0
    assert capsys.readouterr().out == alone and "-" in alone
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    tokenizer = type(tokenizer).from_pretrained(folder)
    tokenizer.add_tokens(["<extra>"])
    tokenizer.save_pretrained(other)
    assert aayn([*flags, "--model", str(folder), "--model", str(other)]) == 2
    assert "token '<extra>' is 300 there and None here" in capsys.readouterr().err
