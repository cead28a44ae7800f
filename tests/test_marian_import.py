"""`aayn import marian` (OPUS-MT's MarianMTModel folders), against transformers' own MarianMTModel: tiny Marian models
trained a few steps by transformers here (tests/marian_helpers.py: swish and a shared vocabulary, relu and separate
ones, a non-zero output bias) give, once imported, transformers' logits and its greedy and beam outputs token for
token; the position tables each side uses against their formulas written out here; the output bias through the
fused loss, resizing and the CTranslate2 export; what aayn cannot map refused in one line."""

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from cli_helpers import fails
from marian_helpers import tiny_marian

from aayn.cli import main as aayn

pytest.importorskip("sentencepiece")
TEXTS = ["Six one eight.", "Two zero four nine.", "One.", "Three three three seven two."]


@pytest.fixture(scope="module")
def marians(tmp_path_factory):
    """{kind: (the Marian folder, its aayn import)} for swish with one vocabulary, relu with two (and without
    OPUS-MT's scaled embeddings, MarianConfig's default), and a multi-target model (`>>fr<<` / `>>es<<`)."""
    root = tmp_path_factory.mktemp("marian")
    made = {}
    kinds = (("swish-shared", "swish", True, False), ("relu-separate", "relu", False, False),
             ("swish-multi", "swish", True, True))  # fmt: skip
    for kind, activation, shared, multi in kinds:
        folder = tiny_marian(root / kind, activation=activation, shared=shared, multi=multi, steps=200 if multi else 60,
                             scale_embedding=kind != "relu-separate")  # fmt: skip
        assert aayn(["import", "marian", str(folder), "--output_dir", str(root / f"{kind}-aayn")]) == 0
        made[kind] = folder, root / f"{kind}-aayn"
    return made


@pytest.mark.both_lines
@pytest.mark.parametrize("kind", ["swish-shared", "relu-separate", "swish-multi"])
def test_an_imported_marian_folder_gives_transformers_logits_and_outputs(marians, kind):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianMTModel

    folder, imported = marians[kind]
    texts = [f">>{code}<< {text}" for code, text in zip(["fr", "es", "fr", "es"], TEXTS)] if "multi" in kind else TEXTS
    marian = MarianMTModel.from_pretrained(folder).eval()
    ours = AutoModelForSeq2SeqLM.from_pretrained(imported).eval()
    tokenizer = AutoTokenizer.from_pretrained(imported)
    assert type(tokenizer).__name__ == "MarianTokenizer" and type(ours).__name__ == "AaynForConditionalGeneration"
    assert ours.config.output_bias and ours.config.position_encoding == "marian"
    # the rules the paper's search runs by: the folder's (beam 3, max_length 24), transformers' defaults for the rest
    assert (ours.config.search_early_stopping, ours.config.length_limit) == (False, [0, 22])
    assert (ours.generation_config.num_beams, ours.generation_config.length_penalty) == (3, 1.0)
    batch = tokenizer(texts, return_tensors="pt", padding=True)  # padded: the masks too
    labels = tokenizer(text_target=["Six un huit.", "Deux zero.", "Un.", "Trois."], return_tensors="pt", padding=True)
    start = marian.prepare_decoder_input_ids_from_labels(labels["input_ids"])
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch, decoder_input_ids=start).logits,
                                   marian(**batch, decoder_input_ids=start).logits, atol=1e-5, rtol=1e-5)  # fmt: skip
    greedy = marian.generate(**batch, num_beams=1).tolist()
    assert len({token for row in greedy for token in row}) > 3 and all(0 in row for row in greedy)  # varied, ended
    assert ours.generate(**batch, num_beams=1, paper_decoding=False).tolist() == greedy
    assert ours.generate(**batch, num_beams=1).tolist() == greedy  # the paper's greedy search: the same tokens
    assert ours.generate(**batch, paper_decoding=False).tolist() == marian.generate(**batch).tolist()  # beam 3


@pytest.mark.both_lines
def test_the_position_tables_against_their_formulas():
    """transformers' MarianMTModel: PE(pos, i) = sin(pos / 10000^(2i/d)) for i < d/2, then the cosines at the same
    frequencies (its `_init_weight`, in float64); marian-nmt (and tensor2tensor, fairseq): sines then cosines at
    10000^(-i/(d/2 - 1)) (marian-nmt's `sinusoidalPositionEmbeddings`)."""
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    from aayn.model.ops_aayn import sinusoidal_positions

    d, n = 16, 40
    half = np.arange(d // 2)
    angles = np.arange(n)[:, None] / np.power(10000.0, 2 * half / d)[None, :]
    formula = torch.tensor(np.concatenate([np.sin(angles), np.cos(angles)], axis=1), dtype=torch.float32)
    assert torch.equal(sinusoidal_positions(0, n, d, torch.device("cpu"), "marian"), formula)
    table = MarianSinusoidalPositionalEmbedding(n, d)
    made = table.create_weight() if hasattr(table, "create_weight") else table._init_weight()  # 5.x, 4.57
    assert torch.equal(table.weight if made is None else made, formula)  # transformers' own table
    increment = math.log(10000.0) / (d / 2 - 1)
    angles = np.arange(n)[:, None] * np.exp(-increment * half)[None, :]
    marian_nmt = torch.tensor(np.concatenate([np.sin(angles), np.cos(angles)], axis=1), dtype=torch.float32)
    torch.testing.assert_close(sinusoidal_positions(0, n, d, torch.device("cpu"), "tensor2tensor"), marian_nmt)
    assert not torch.allclose(marian_nmt, formula, atol=1e-3)  # two tables: a Marian checkpoint reads one


def test_the_output_bias_trains_through_the_fused_loss_and_survives_resizing(marians):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = marians["swish-shared"][1]
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, dropout=0.0, attention_dropout=0.0).train()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(TEXTS, text_target=["Six un huit.", "Deux.", "Un.", "Trois."], return_tensors="pt", padding=True)
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    grads = []
    for fused in (True, False):  # the fused loss (training) against the logits' loss (return_logits)
        model.zero_grad()
        output = model(**batch, return_logits=not fused)
        assert (output.logits is None) == fused
        output.loss.backward()
        grads.append(model.lm_head.bias.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)
    assert grads[0].abs().sum() > 0
    bias = model.lm_head.bias.detach().clone()
    model.resize_token_embeddings(len(bias) + 3)
    assert torch.equal(model.lm_head.bias[: len(bias)], bias) and model.lm_head.bias.shape[0] == len(bias) + 3


def test_the_exports_of_an_imported_marian_folder_translate_as_it(marians, tmp_path, capsys):
    """CTranslate2 (swish and the output bias in its spec; greedy, as its beam search has its own rules) and ONNX
    (the paper's search by the folder's rules, beam 3): the folder's own outputs."""
    pytest.importorskip("ctranslate2")
    outputs = []
    for kind in ("swish-shared", "relu-separate"):
        exported, imported = tmp_path / kind, marians[kind][1]
        assert aayn(["export", "--format", "ctranslate2", "--model", str(imported), "--output_dir", str(exported)]) == 0
        capsys.readouterr()
        for model in (imported, exported):
            assert aayn(["translate", "--model", str(model), "--num_beams", "1", *TEXTS]) == 0
            outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[2] == outputs[3] and outputs[0] != outputs[2]
    pytest.importorskip("onnxruntime")
    imported = marians["relu-separate"][1]
    assert aayn(["export", "--format", "onnx", "--model", str(imported), "--output_dir", str(tmp_path / "onnx")]) == 0
    capsys.readouterr()
    for model in (imported, tmp_path / "onnx"):
        assert aayn(["translate", "--model", str(model), *TEXTS]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[-1] == outputs[-2]


@pytest.mark.both_lines
def test_pipeline_translates_an_imported_marian_folder_without_aayn_on_either_line(marians, capsys):
    """`pipeline("translation", trust_remote_code=True)` in a process that never imports aayn, on this line and (with
    AAYN_OTHER_PYTHON) the other: `aayn translate`'s outputs."""
    imported = str(marians["swish-shared"][1])
    assert aayn(["translate", "--model", imported, *TEXTS]) == 0
    expected = capsys.readouterr().out.splitlines()
    script = (
        "import json, sys\n"
        "from transformers import pipeline\n"
        "translate = pipeline('translation', model=sys.argv[1], trust_remote_code=True)\n"
        "assert 'aayn' not in sys.modules\n"
        "print(json.dumps([row['translation_text'] for row in translate(json.loads(sys.argv[2]))]))\n"
    )
    for python in filter(None, (sys.executable, os.environ.get("AAYN_OTHER_PYTHON"))):
        env = dict(
            os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(marians["swish-shared"][1].parent / python[-9:])
        )
        done = subprocess.run([python, "-c", script, imported, json.dumps(TEXTS)], capture_output=True, text=True,
                              env=env, cwd="/")  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == expected


def test_what_aayn_cannot_map_is_refused_in_one_line(marians, saved, tmp_path, capsys):
    folder = marians["swish-shared"][0]
    command = ["import", "marian"]
    error = fails(capsys, *command, saved[0], "--output_dir", tmp_path / "a")
    assert "holds a 'aayn' model, not a Marian one" in error and not (tmp_path / "a").exists()
    odd = tmp_path / "odd"
    shutil.copytree(folder, odd)
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "activation_function": "cube"}))
    error = fails(capsys, *command, odd, "--output_dir", tmp_path / "b")
    assert "activation_function='cube' is not one aayn knows" in error
    (odd / "config.json").write_text(json.dumps(config))
    settings = json.loads((odd / "tokenizer_config.json").read_text())
    settings.pop("source_lang"), settings.pop("target_lang")
    (odd / "tokenizer_config.json").write_text(json.dumps(settings))
    error = fails(capsys, *command, odd, "--output_dir", tmp_path / "c")
    assert "does not name its languages: give --source_lang and --target_lang" in error
    assert aayn([*command, str(odd), "--output_dir", str(tmp_path / "c"), "--source_lang", "en", "--target_lang",
                 "fr"]) == 0  # fmt: skip
    package = tmp_path / "multi.argosmodel"  # Argos puts no token before a text: a multi-target model is refused
    error = fails(capsys, "export", "--format", "argos", "--model", marians["swish-multi"][1], "--output", package)
    assert "is a multi-target model (>>es<<, >>fr<< before the text)" in error and not package.exists()


def test_an_imported_marian_folder_takes_a_glossary_alignments_and_scores(marians, tmp_path, capsys):
    """What no other tool gives an OPUS-MT model: a glossary's term in the translation of each source holding it;
    alignments from one head of the last layer (OPUS-MT's guided-alignment head); its pairs scored; a test split
    evaluated."""
    imported = str(marians["relu-separate"][1])
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("six\tsix\n", encoding="utf-8")
    texts = ["Two six four nine.", "One six.", "Three."]
    assert aayn(["translate", "--model", imported, "--num_beams", "2", *texts]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert aayn(["translate", "--model", imported, "--num_beams", "2", "--glossary", str(glossary), *texts]) == 0
    held = capsys.readouterr().out.splitlines()
    assert all("six" in line for line in held[:2]) and held[2] == plain[2]
    assert not all("six" in line for line in plain[:2])  # the glossary made the difference
    flags = ["--num_beams", "1", "--print_alignment", "hard", "--alignment_heads", "1"]
    assert aayn(["translate", "--model", imported, *flags, *texts]) == 0
    assert all("-" in line.split("\t")[1] for line in capsys.readouterr().out.splitlines())
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("One six.\n", encoding="utf-8")
    assert aayn(["score", "--model", imported, "--source", str(pairs), "--target", str(pairs)]) == 0
    assert len(capsys.readouterr().out.split("\t")) == 2
    corpus = marians["relu-separate"][0].parent / "relu-separate-corpus"  # the numbers it was trained on
    flags = ["--dataset_name", str(corpus), "--source_lang", "en", "--target_lang", "fr", "--max_samples", "4"]
    assert aayn(["evaluate", "--model", imported, *flags]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 4


@pytest.mark.both_lines
def test_aayn_train_fine_tunes_an_imported_marian_folder(marians, tmp_path):
    """`aayn train --model_name_or_path FOLDER` (the recipe gives the folder's shape): the output bias trains,
    Marian's sinusoids and its tokenizer carry into the tuned folder."""
    from training_helpers import FAST, tiny_recipe, write_numbers_corpus, write_recipe
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from aayn.training import parse_arguments, run

    folder = marians["relu-separate"][1]
    corpus = write_numbers_corpus(tmp_path / "numbers")
    recipe = tiny_recipe(corpus, tmp_path / "tuned", **FAST, model_name_or_path=str(folder), d_model=16, ffn_dim=32)
    assert "test_bleu" in run(*parse_arguments([write_recipe(tmp_path / "r.yaml", recipe).as_posix()]))
    tuned, start = (AutoModelForSeq2SeqLM.from_pretrained(path) for path in (tmp_path / "tuned", folder))
    assert tuned.config.output_bias and tuned.config.position_encoding == "marian"
    assert not torch.equal(tuned.lm_head.bias, start.lm_head.bias)  # the bias trained
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tuned")
    assert type(tokenizer).__name__ == "MarianTokenizer"
    assert tokenizer("Six one.")["input_ids"] == AutoTokenizer.from_pretrained(folder)("Six one.")["input_ids"]


def test_aayn_serve_puts_a_multi_target_models_token_and_serves_files_glossaries_and_keys(marians, tmp_path, capsys):
    """A multi-target model (OPUS-MT's en-mul: `>>fr<<`, `>>es<<`) behind `aayn serve --model`: a pair per target
    token (/languages), the asked target's token put before each text (the answers are the folder's own
    translations of the texts led by the token, which differ by target), a document (.txt), a glossary, API keys."""
    from server_helpers import Server
    from test_libretranslate import download, multipart

    from aayn.translation.opening import open_translator

    imported = marians["swish-multi"][1]
    translator = open_translator([str(imported)])
    expected = {code: translator.translate([f">>{code}<< {text}" for text in TEXTS]) for code in ("fr", "es")}
    assert expected["fr"] != expected["es"]  # the token matters to this model: the test can tell them apart
    database = tmp_path / "keys.db"
    assert aayn(["serve", "keys", "add", "100", "--api_keys_db_path", str(database)]) == 0
    key = capsys.readouterr().out.strip()
    server = Server(imported, "--api_keys", "--api_keys_db_path", database)
    try:
        assert server.get("/languages")[0]["code"] == "en" and server.get("/languages")[0]["targets"] == ["es", "fr"]
        for code in ("fr", "es"):
            status, answer, _ = server.post({"q": TEXTS, "source": "en", "target": code, "api_key": key})
            assert status == 200 and answer["translatedText"] == expected[code], answer
        assert server.post({"q": "One.", "source": "en", "target": "fr", "api_key": "not-a-key"})[0] == 403
        body, content_type = multipart({"file": ("a.txt", "\n".join(TEXTS).encode()), "source": "en", "target": "es",
                                        "api_key": key})  # fmt: skip
        status, answer, _ = server.post(body, raw=True, path="/translate_file", content_type=content_type)
        assert status == 200, answer
        assert download(answer["translatedFileUrl"])[1].decode().splitlines() == expected["es"]
        html = {"q": "<p>Six <b>one</b> eight.</p>", "source": "en", "target": "es", "format": "html", "api_key": key}
        status, answer, _ = server.post(html)  # markup placed by alignments read past the token
        assert status == 200 and answer["translatedText"].startswith("<p>") and "<b>" in answer["translatedText"]
        term = {"One": "cuatro"}
        status, answer, _ = server.post({"q": "One.", "source": "en", "target": "es", "glossary": term, "api_key": key})
        assert status == 200 and "cuatro" in answer["translatedText"].lower(), answer
    finally:
        assert server.stop()[0] == 0


def test_alignments_of_a_text_led_by_a_target_token_are_read_on_the_text_alone():
    """`aayn serve` aligns what it sent (`>>es<<` + the text): the token's links go, the other source positions are
    one less, so markup and documents are placed on the client's text; hypotheses without alignments pass as they
    are."""
    from aayn.formats.alignment import Alignment
    from aayn.formats.translator import with_token, without_token

    assert with_token(">>es<<", ["Two.", " ", ""]) == [">>es<< Two.", " ", ""]  # blank texts stay blank
    aligned = Alignment([(0, 0, 0.9), (1, 1, 0.8), (2, 2, 0.7)], [">>es<<", "▁Two", "."], ["▁Dos", ".", "</s>"])
    best = without_token(">>es<<", [[(-1.0, "Dos.", aligned)], [(-2.0, "Tres.")]])
    assert best[0][0][2].links == [(0, 1, 0.8), (1, 2, 0.7)] and best[0][0][2].source_tokens == ["▁Two", "."]
    assert best[1] == [(-2.0, "Tres.")] and without_token("", best) is best
