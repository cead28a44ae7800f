"""`aayn export --format ctranslate2`: the exported model computes what ours computes.

The reference is our PyTorch model: CTranslate2's token log-probabilities of given targets (every weight, the
positions, the vocabulary and the special tokens must map over exactly), and its greedy translations of the
test sentences, from a model trained just enough to translate them.
"""

import json
import subprocess
import sys

import pytest
import torch
from cli_helpers import translate_fails
from tiny_models import tiny_config
from training_helpers import write_numbers_corpus

from aayn import AaynForConditionalGeneration
from aayn.cli import main as aayn
from aayn.data.tokenizer import word_tokenizer
from aayn.formats import FORMATS, export_model
from aayn.formats.aayn import SavedModel

ctranslate2 = pytest.importorskip("ctranslate2")

TOKENS = ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(4, 40)]


def exported(model, folder, quantization=None):
    """`model` (in memory, over TOKENS) written as a CTranslate2 folder by the format's template."""
    return FORMATS["ctranslate2"].write(SavedModel(model, word_tokenizer(TOKENS)), folder, quantization=quantization)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_ctranslate2_scores_equal_ours(norm_first, tmp_path):
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(tiny_config(norm_first=norm_first)).eval()
    translator = ctranslate2.Translator(str(exported(model, tmp_path / "ct2")), device="cpu")
    source = torch.randint(4, 40, (3, 7))
    source[:, -1] = 2
    target = torch.randint(4, 40, (3, 6))
    target[:, -1] = 2
    # CTranslate2 starts the decoder from decoder_start_token and appends </s> itself
    scores = translator.score_batch(
        [[TOKENS[i] for i in row] for row in source.tolist()],
        [[TOKENS[i] for i in row[:-1]] for row in target.tolist()],
    )
    with torch.no_grad():
        decoder_input = torch.cat([torch.full((3, 1), model.config.decoder_start_token_id), target[:, :-1]], dim=1)
        logits = model(input_ids=source, decoder_input_ids=decoder_input).logits
    ours = logits.log_softmax(-1).gather(-1, target[..., None])[..., 0]
    torch.testing.assert_close(torch.tensor([score.log_probs for score in scores]), ours, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("quantization", [None, "int8"])
def test_export_leaves_the_model_untouched(quantization, tmp_path):
    """CTranslate2 converts and quantizes the arrays of its spec in place: they must be copies of our weights."""
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(tiny_config())
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    exported(model, tmp_path / "ct2", quantization=quantization)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def trained_numbers_model(tokenizer, corpus, steps: int = 60) -> AaynForConditionalGeneration:
    """A tiny model taught to translate the numbers corpus (a plain teacher-forced loop, seconds on a CPU)."""
    from aayn.data import load_translation_dataset

    train = load_translation_dataset(str(corpus), source_lang="en", target_lang="fr")["train"]["translation"]
    batch = tokenizer(
        [row["en"] for row in train], text_target=[row["fr"] for row in train], padding=True, return_tensors="pt"
    )
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer), d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    for _ in range(steps):
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def test_exported_model_translates_the_test_sentences_like_ours(saved, tmp_path, capsys):
    _, _, tokenizer = saved
    corpus = write_numbers_corpus(tmp_path / "numbers")
    model = trained_numbers_model(tokenizer, corpus)
    model.save_pretrained(tmp_path / "trained")
    tokenizer.save_pretrained(tmp_path / "trained")
    assert (
        aayn(
            [
                "export",
                "--format",
                "ctranslate2",
                "--model",
                str(tmp_path / "trained"),
                "--output_dir",
                str(tmp_path / "ct2"),
            ]
        )
        == 0
    )
    assert "ctranslate2 model written to" in capsys.readouterr().out
    assert {"model.bin", "config.json", "tokenizer.json"} <= {path.name for path in (tmp_path / "ct2").iterdir()}

    english = (corpus / "test.en").read_text().splitlines()
    french = (corpus / "test.fr").read_text().splitlines()
    encoded = tokenizer(english, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model.generate(**encoded, num_beams=1)
    ours = tokenizer.batch_decode(ours, skip_special_tokens=True)
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(sentence)["input_ids"]) for sentence in english]
    results = translator.translate_batch(sources, beam_size=1, max_decoding_length=64)
    theirs = [tokenizer.convert_tokens_to_string(result.hypotheses[0]) for result in results]
    assert theirs == ours
    assert sum(a == b for a, b in zip(ours, french)) >= len(french) // 2  # the model does translate
    # the round trip the README shows: `aayn translate --model <exported folder>`
    assert aayn(["translate", "--model", str(tmp_path / "ct2"), "--num_beams", "1", *english]) == 0
    assert capsys.readouterr().out.splitlines() == [text.strip() for text in ours]
    assert aayn(["translate", "--model", str(tmp_path / "ct2"), "--nbest", "2", english[0]]) == 0
    ranked = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row[0] for row in ranked] == ["0", "0"] and float(ranked[0][1]) >= float(ranked[1][1])
    flags = ["translate", "--model", str(tmp_path / "ct2"), "--model", str(tmp_path / "trained"), "One."]
    assert aayn(flags) == 2 and "is a CTranslate2 model (`aayn export`): it translates alone" in capsys.readouterr().err
    # ... in a process that imports neither torch nor transformers (what a call costs)
    probe = (
        "import sys; from aayn.cli import main; code = main(sys.argv[1:]); "
        "print('imported:', sorted(m for m in ('torch', 'transformers') if m in sys.modules), file=sys.stderr); "
        "sys.exit(code)"
    )
    flags = ["translate", "--model", str(tmp_path / "ct2"), "--num_beams", "1", *english]
    run = subprocess.run([sys.executable, "-c", probe, *flags], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [text.strip() for text in ours]
    assert run.stderr.splitlines()[-1] == "imported: []"
    # `aayn evaluate` scores the export as it scores the folder it came from (greedy: the same translations)
    scores = []
    for model in ("trained", "ct2"):
        flags = ["--dataset_name", str(corpus), "--source_lang", "en", "--target_lang", "fr", "--num_beams", "1"]
        assert aayn(["evaluate", "--model", str(tmp_path / model), *flags]) == 0
        scores.append(json.loads(capsys.readouterr().out))
    assert scores[0] == scores[1] and scores[0]["bleu"] > 0


TEXTS = [
    "one two three",
    "  Twenty-five,   thirty\tsix!  ",
    "Ça coûte 3,50 € — déjà vu?",
    "emoji 🙂 and 汉字 and \u00a0nbsp",
    "x" * 200,
]


def test_exported_tokenizer_is_transformers_tokenizer(saved, tmp_path):
    """The exported folder's tokenizer read with `tokenizers` alone gives the ids, tokens and text that
    `AutoTokenizer` gives on the same folder (on both transformers lines)."""
    from transformers import AutoTokenizer

    from aayn.formats.ctranslate2.engine import ExportedTokenizer

    export_model(saved[0], tmp_path / "ct2")
    reference, ours = AutoTokenizer.from_pretrained(tmp_path / "ct2"), ExportedTokenizer(tmp_path / "ct2")
    ids = reference(TEXTS)["input_ids"]
    assert ours.encode(TEXTS) == ids
    assert ours.model_max_length == reference.model_max_length == 32
    for row in ids:
        tokens = reference.convert_ids_to_tokens(row)
        assert ours.tokens(row) == tokens
        assert ours.text(tokens[:-1]) == reference.convert_tokens_to_string(tokens[:-1])


def test_exported_model_keeps_our_length_limits(saved, tmp_path, capsys):
    """An untrained model never stops by itself: its outputs show the limits. Sources cut to the tokenizer's (or
    the model's) length, outputs to source + 50 tokens (past max_position_embeddings: the exported sinusoid table
    reaches as far as ours extend) or to --max_new_tokens: the same greedy outputs as our search's."""
    folder, _, _ = saved
    assert (
        aayn(["export", "--format", "ctranslate2", "--model", str(folder), "--output_dir", str(tmp_path / "ct2")]) == 0
    )
    capsys.readouterr()
    texts = ["one two three", "twenty five " * 20]  # the second is over the tokenizer's 32 tokens
    # one sentence a batch, then both in one batch: each sentence keeps its own limit in both engines, so nothing
    # depends on a batch-mate (CTranslate2 has one limit per call: aayn gives it one source length per call)
    for extra in ([], ["--max_new_tokens", "20"], ["--batch_tokens", "1"]):
        outputs = []
        for model in (folder, tmp_path / "ct2"):
            flags = ["translate", "--model", str(model), "--num_beams", "1", *extra, *texts]
            assert aayn(flags) == 0
            outputs.append(capsys.readouterr().out.splitlines())
        assert outputs[0] == outputs[1]
        assert len(outputs[0]) == 2 and all(outputs[0])
        assert len(outputs[0][0]) < len(outputs[0][1])  # the short source's limit is its own


def test_exported_folder_errors(saved, tmp_path, monkeypatch, capsys):
    from aayn.formats.ctranslate2 import writer

    monkeypatch.setattr(writer, "EXTRA_TARGET_TOKENS", -1)  # an export from before the table made room for + 50
    old = str(export_model(saved[0], tmp_path / "old"))
    monkeypatch.undo()
    error = translate_fails(capsys, "--model", old, "--num_beams", "1", "twenty five " * 20)
    assert "No position encodings are defined" in error and "export the model again" in error
    folder = str(export_model(saved[0], tmp_path / "ct2"))
    one = tmp_path / "one.txt"
    one.write_text("One.\n")
    assert aayn(["score", "--model", folder, "--source", str(one), "--target", str(one)]) == 2
    assert "is a CTranslate2 model (`aayn export`): it translates without scoring pairs; give the aayn folder" in (
        capsys.readouterr().err
    )
    assert "runs on cpu or cuda" in translate_fails(capsys, "--model", folder, "--device", "mps", "One.")
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 0)
    assert "CTranslate2 sees no CUDA device" in translate_fails(capsys, "--model", folder, "--device", "cuda", "x")
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    error = translate_fails(capsys, "--model", folder, "--device", "cuda:1", "One.")
    assert "this machine has 1 CUDA device(s)" in error
    real = ctranslate2.Translator

    class Cuda12Wheel:  # loads on a CUDA 13 machine, and fails at the first translation (an H200, 2026-11-27)
        def __init__(self, path, device="cpu", **options):
            self.real, self.device = real(path, **options), device

        def translate_batch(self, *args, **kwargs):
            if self.device == "cuda":
                raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")
            return self.real.translate_batch(*args, **kwargs)

        def __getattr__(self, name):  # the rest as the real one (score_batch)
            return getattr(self.real, name)

    monkeypatch.setattr(ctranslate2, "Translator", Cuda12Wheel)
    error = translate_fails(capsys, "--model", folder, "--device", "cuda", "One.")
    assert "--device cuda: CTranslate2" in error and "libcublas.so.12 is not found" in error and "CUDA 12" in error
    assert aayn(["translate", "--model", folder, "--device", "cpu", "One."]) == 0
    monkeypatch.setattr(ctranslate2, "Translator", real)
    (tmp_path / "ct2" / "generation_config.json").write_text("{")
    assert "generation_config.json is not valid JSON" in translate_fails(capsys, "--model", folder, "One.")
    (tmp_path / "ct2" / "tokenizer.json").unlink()
    assert "no tokenizer.json in the folder" in translate_fails(capsys, "--model", folder, "One.")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    assert "pip install 'aayn[ct2]'" in translate_fails(capsys, "--model", folder, "One.")


def export_fails(capsys, *flags: str) -> str:
    """`aayn export` with a user error: exit status 2 and one message, no traceback."""
    assert aayn(["export", "--format", "ctranslate2", *flags]) == 2
    error = capsys.readouterr().err
    assert "aayn export: error: " in error and "Traceback" not in error
    return error


def test_export_errors(saved, tmp_path, monkeypatch, capsys):
    folder = saved[0]
    assert "(no config.json)" in export_fails(capsys, "--model", str(tmp_path), "--output_dir", str(tmp_path / "out"))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    error = export_fails(capsys, "--model", str(folder), "--output_dir", str(tmp_path / "busy"))
    assert "busy exists and is not empty" in error
    assert [path.name for path in (tmp_path / "busy").iterdir()] == ["keep.txt"]
    from transformers import MarianConfig, MarianMTModel

    MarianMTModel(
        MarianConfig(
            vocab_size=40,
            pad_token_id=0,
            decoder_start_token_id=0,
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_ffn_dim=16,
            decoder_ffn_dim=16,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
        )
    ).save_pretrained(tmp_path / "marian")
    error = export_fails(capsys, "--model", str(tmp_path / "marian"), "--output_dir", str(tmp_path / "m"))
    assert "holds a 'marian' model, not an aayn one" in error and not (tmp_path / "m").exists()
    with pytest.raises(SystemExit):
        aayn(["export", "--format", "openvino", "--model", str(folder), "--output_dir", str(tmp_path / "x")])
    with pytest.raises(ValueError, match="activation_function"):
        exported(AaynForConditionalGeneration(tiny_config(activation_function="tanh")), tmp_path / "t")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ImportError, match=r"pip install 'aayn\[ct2\]'"):
        exported(AaynForConditionalGeneration(tiny_config()), tmp_path / "none")
    assert not (tmp_path / "t").exists() and not (tmp_path / "none").exists()
