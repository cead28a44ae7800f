"""`aayn export --format onnx`: the encoder and the decoder with its key/value cache as ONNX graphs, run by ONNX
Runtime, checked against the torch model they came from: logits within 1e-4 in float32, greedy outputs token for
token on real verses (a model trained by fairseq on Bible verses and imported, tests/data/fairseq), a model of
the paper's widths and vocabulary, and the refusals."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from fairseq_helpers import import_as_recorded
from transformers import AutoTokenizer

from aayn import AaynConfig, AaynForConditionalGeneration
from aayn.cli import main as aayn
from aayn.formats import export_model
from aayn.formats.translator import DecodingSettings

onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
from aayn.formats.onnx.engine import FILES, OnnxTranslator
from aayn.formats.onnx.writer import cache_names, export_graphs, quantized_copy

FAIRSEQ = Path(__file__).parent / "data" / "fairseq" / "postnorm-spm"


@pytest.fixture(scope="module")
def trained(tmp_path_factory, onnx_graphs_once):
    """A model trained on Bible verses (fairseq's, imported) and its ONNX export: (folder, export, verses). The
    graphs are exported once per run, here or by test_engine_rules.py (export_cache.py); the int8 test's export
    copies them, then quantizes them."""
    root = tmp_path_factory.mktemp("onnx")
    import_as_recorded("postnorm-spm", root / "model")  # the recordings' limit, §6.1's (the ONNX engine's)
    assert aayn(["export", "--format", "onnx", "--model", str(root / "model"), "--output_dir", str(root / "onnx")]) == 0
    record = json.loads((FAIRSEQ / "fairseq.json").read_text(encoding="utf-8"))
    return root / "model", root / "onnx", record["interactive"]["source_texts"]


def torch_model(folder):
    return AaynForConditionalGeneration.from_pretrained(folder).eval()


def batch(folder, texts):
    encoded = AutoTokenizer.from_pretrained(folder)(texts, return_tensors="np", padding=True)
    return encoded["input_ids"].astype(np.int64), encoded["attention_mask"].astype(np.int64)


def test_the_folder_holds_the_graphs_and_what_translating_needs(trained):
    _, exported, _ = trained
    names = {path.name for path in exported.iterdir()}
    assert set(FILES) | {"config.json", "generation_config.json", "tokenizer.json", "onnx_export.json"} <= names
    assert json.loads((exported / "onnx_export.json").read_text())["opset"] == 18
    assert not [name for name in names if name.startswith(".")]


def test_both_decoder_graphs_give_the_torch_model_s_logits_within_1e_4(trained):
    folder, exported, verses = trained
    model, runtime = torch_model(folder), OnnxTranslator(exported).sessions
    ids, mask = batch(folder, verses[:6])  # padded: rows of different lengths
    hidden = runtime.encode(ids, mask)
    source, attention = torch.from_numpy(ids), torch.from_numpy(mask)
    with torch.no_grad():
        expected = model.get_encoder()(input_ids=source, attention_mask=attention).last_hidden_state
    real = mask.astype(bool)
    np.testing.assert_allclose(hidden[real], expected.numpy()[real], atol=1e-4, rtol=0)
    prefix = np.array([[2, 37, 9, 120]] * len(ids), dtype=np.int64)  # decoder start, then three target tokens
    first = runtime.first.run(None, {"input_ids": prefix[:, :3], "encoder_attention_mask": mask,
                                     "encoder_hidden_states": hidden})  # fmt: skip
    feed = {"input_ids": prefix[:, 3:], "encoder_attention_mask": mask}
    feed.update(zip(cache_names(model.config.decoder_layers, "past_key_values"), first[1:]))
    later = onnxruntime.InferenceSession(str(exported / FILES[2])).run(None, feed)  # the file as exported
    with torch.no_grad():
        logits = model(input_ids=source, attention_mask=attention, decoder_input_ids=torch.from_numpy(prefix)).logits
    np.testing.assert_allclose(first[0], logits[:, :3].numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(later[0], logits[:, 3:].numpy(), atol=1e-4, rtol=0)


def best_tokens(runtime, ids, mask, settings):
    pad = runtime.pad
    return [[t for t in hypotheses[0][1].tolist() if t != pad] for hypotheses in runtime.search(ids, mask, settings)]


def test_greedy_outputs_equal_the_torch_model_s_token_for_token(trained):
    folder, exported, verses = trained
    model, runtime = torch_model(folder), OnnxTranslator(exported)
    pad = model.config.pad_token_id
    for start in range(0, len(verses), 8):
        ids, mask = batch(folder, verses[start : start + 8])
        ours = best_tokens(runtime, ids, mask, DecodingSettings(1, 1.0))
        expected = model.generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), num_beams=1)
        assert ours == [[token for token in row if token != pad] for row in expected.tolist()]
    texts = runtime.translate(verses, num_beams=1)
    assert texts == torch_translations(model, folder, verses)


@pytest.mark.parametrize(
    "alpha, early_stopping, min_new_tokens",
    [(0.6, "never", 0), (1.0, "never", 0), (-0.5, "never", 0), (-0.5, "never", 4), (0.6, True, 0), (0.6, False, 0)],
)
def test_beam_search_equals_the_paper_search_of_the_torch_model(trained, alpha, early_stopping, min_new_tokens):
    """The engine's search against `generate()`'s §6.1 search (beam 4, the per-sentence limit, alpha as given,
    each stopping rule, a minimum length) on real verses, padded batches of 8: the same 3 best hypotheses, token
    for token, and their scores."""
    folder, exported, verses = trained
    model, runtime = torch_model(folder), OnnxTranslator(exported)
    pad = model.config.pad_token_id
    settings = DecodingSettings(4, alpha, nbest=3, early_stopping=early_stopping, min_new_tokens=min_new_tokens)
    for start in range(0, len(verses), 8):
        ids, mask = batch(folder, verses[start : start + 8])
        found = runtime.search(ids, mask, settings)
        out = model.generate(
            torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            num_beams=4,
            length_penalty=alpha,
            num_return_sequences=3,
            return_dict_in_generate=True,
            length_normalization="gnmt",
            early_stopping=early_stopping,
            min_new_tokens=min_new_tokens,
        )  # fmt: skip  §6.1's, not fairseq's
        ours = [[t for t in tokens.tolist() if t != pad] for hypotheses in found for _, tokens in hypotheses]
        assert ours == [[token for token in row if token != pad] for row in out.sequences.tolist()]
        scores = [score for hypotheses in found for score, _ in hypotheses]
        np.testing.assert_allclose(scores, out.sequences_scores.numpy(), rtol=1e-4)


def torch_translations(model, folder, verses):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    out = [model.generate(**tokenizer([verse], return_tensors="pt"), num_beams=1)[0] for verse in verses]
    return [text.strip() for text in tokenizer.batch_decode(out, skip_special_tokens=True)]


def test_int8_quantization_shrinks_the_graphs_and_still_translates(trained, tmp_path):
    folder, exported, verses = trained
    export_model(folder, tmp_path / "int8", format="onnx", quantization="int8")
    for name in FILES:
        assert (tmp_path / "int8" / name).stat().st_size < (exported / name).stat().st_size
    texts = OnnxTranslator(tmp_path / "int8").translate(verses[:4], num_beams=1)
    assert len(texts) == 4 and all(texts)
    # the bench's int8 arm quantizes a copy of the float32 export instead of exporting again: the same files as
    # the int8 export (whose float graphs are this module's export, export_cache.py)
    quantized_copy(exported, tmp_path / "copied")
    for name in (*FILES, "onnx_export.json"):
        assert (tmp_path / "copied" / name).read_bytes() == (tmp_path / "int8" / name).read_bytes(), name


def test_a_model_of_the_paper_s_widths_and_vocabulary_exports(tmp_path):
    """The paper's default configuration, 37,000 shared tokens, d_model 512, 8 heads, ffn 2048 (random weights), with
    2 + 2 of its 6 + 6 layers (the export unrolls the same layer graph per layer: the paper's depth adds 20 s here
    and nothing a second layer does not show): logits within 1e-4 (the encoder's graph and the first decoder
    step's; the step with a cache is traced as for the tiny models above)."""
    torch.manual_seed(0)
    model = AaynForConditionalGeneration(AaynConfig(encoder_layers=2, decoder_layers=2)).eval()
    model.config._attn_implementation = "eager"
    (tmp_path / "onnx").mkdir()
    export_graphs(model, tmp_path / "onnx", files=FILES[:2])
    runtime_encoder = onnxruntime.InferenceSession(str(tmp_path / "onnx" / FILES[0]))
    first = onnxruntime.InferenceSession(str(tmp_path / "onnx" / FILES[1]))
    ids = np.array([[5, 900, 36999, 2], [17, 2, 0, 0]], dtype=np.int64)
    mask = (ids != 0).astype(np.int64)
    hidden = runtime_encoder.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    start = np.full((2, 1), model.config.decoder_start_token_id, dtype=np.int64)
    logits = first.run(None, {"input_ids": start, "encoder_attention_mask": mask, "encoder_hidden_states": hidden})[0]
    with torch.no_grad():
        expected = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                         decoder_input_ids=torch.from_numpy(start)).logits  # fmt: skip
    np.testing.assert_allclose(logits, expected.numpy(), atol=1e-4, rtol=0)


def test_what_cannot_be_exported_is_refused_in_one_line(trained, tmp_path, capsys):
    folder, _, _ = trained
    command = ["export", "--format", "onnx", "--model", str(folder), "--output_dir", str(tmp_path / "out")]
    assert aayn([*command, "--quantization", "float16"]) == 2
    assert "ONNX export quantizes to int8" in capsys.readouterr().err
    assert aayn(["export", "--format", "onnx", "--model", str(tmp_path), "--output_dir", str(tmp_path / "o")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


def test_the_search_s_candidates_are_a_stable_sort_s_first(trained):
    """The engine's candidates graph (log-softmax, bans, scores, ONNX's TopK) against numpy: the first `count` of
    a stable descending sort of each sentence's scored candidates, on rows full of ties and -inf scores (beams not
    yet live), with rows at their limit (eos only) and pad banned."""
    _, exported, _ = trained
    sessions = OnnxTranslator(exported).sessions
    vocab, eos, pad = (
        sessions.config["decoder_vocab_size"],
        sessions.config["eos_token_id"],
        sessions.config["pad_token_id"],
    )
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, k = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        logits = rng.integers(-3, 3, size=(n * k, vocab)).astype(np.float32)
        scores = rng.integers(-4, 0, size=(n, k)).astype(np.float32)
        scores[rng.random((n, k)) < 0.3] = -np.inf
        at_limit = rng.random(n) < 0.3
        count = int(rng.integers(1, 2 * k + 1))
        values, beams, words = sessions.candidates(logits, scores, at_limit, count)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        log_probs[:, pad] = -np.inf
        log_probs[np.repeat(at_limit, k)] = np.where(
            np.arange(vocab) == eos, log_probs[np.repeat(at_limit, k)], -np.inf
        )
        expected = (scores.reshape(-1, 1) + log_probs).reshape(n, -1)
        order = np.argsort(-expected, axis=1, kind="stable")[:, :count]
        finite = np.isfinite(np.take_along_axis(expected, order, 1))
        assert ((beams * vocab + words == order) | ~finite).all()
        np.testing.assert_allclose(values, np.take_along_axis(expected, order, 1), rtol=1e-5)


def cli_lines(capsys, *argv) -> list[str]:
    assert aayn(list(argv)) == 0, capsys.readouterr().err[-2000:]
    return capsys.readouterr().out.splitlines()


def test_aayn_translate_and_nbest_on_the_folder_equal_the_torch_model_s(trained, capsys):
    """The folder's translations through the `Translator` template, the same batches as torch's: the texts and the
    n-best lists (with their scores, within float rounding) equal the torch model's, §6.1's search (greedy: the
    search tests above)."""
    folder, exported, verses = trained
    flags = ["--num_beams", "4", "--length_penalty", "0.6", "--batch_tokens", "300", *verses[:24]]
    assert cli_lines(capsys, "translate", "--model", str(exported), *flags) == cli_lines(
        capsys, "translate", "--model", str(folder), *flags
    )
    ours = [
        line.split("\t") for line in cli_lines(capsys, "translate", "--model", str(exported), "--nbest", "2", *flags)
    ]
    theirs = [
        line.split("\t") for line in cli_lines(capsys, "translate", "--model", str(folder), "--nbest", "2", *flags)
    ]
    assert [(i, text) for i, _, text in ours] == [(i, text) for i, _, text in theirs] and len(ours) == 48
    np.testing.assert_allclose([float(s) for _, s, _ in ours], [float(s) for _, s, _ in theirs], rtol=1e-4)


def test_aayn_score_and_evaluate_on_the_folder_equal_the_torch_model_s(trained, capsys, tmp_path):
    folder, exported, verses = trained
    sources, targets = verses[:10], cli_lines(capsys, "translate", "--model", str(folder), *verses[:10])
    targets[3] = "Une phrase qui n'est pas la traduction."
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("\n".join(targets) + "\n", encoding="utf-8")
    pairs = ["--source", str(tmp_path / "src.txt"), "--target", str(tmp_path / "tgt.txt"), "--per_token"]
    ours = [[float(v) for v in line.replace("\t", " ").split()] for line in
            cli_lines(capsys, "score", "--model", str(exported), *pairs)]  # fmt: skip
    theirs = [[float(v) for v in line.replace("\t", " ").split()] for line in
              cli_lines(capsys, "score", "--model", str(folder), *pairs)]  # fmt: skip
    assert [len(row) for row in ours] == [len(row) for row in theirs]
    np.testing.assert_allclose(np.concatenate(ours), np.concatenate(theirs), rtol=1e-4, atol=1e-4)
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.en").write_text("\n".join(verses[:12]) + "\n", encoding="utf-8")  # the references: other verses
    (data / "test.fr").write_text("\n".join(verses[12:24]) + "\n", encoding="utf-8")
    scores = [
        json.loads("".join(cli_lines(capsys, "evaluate", "--model", str(model), "--dataset_name", str(data),
                                     "--source_lang", "en", "--target_lang", "fr", "--num_beams", "2")))
        for model in (folder, exported)
    ]  # fmt: skip
    assert scores[0]["bleu"] == scores[1]["bleu"] and scores[0]["chrf"] == scores[1]["chrf"]


def test_what_the_folder_cannot_do_is_refused_in_one_line(trained, capsys, tmp_path):
    _, exported, verses = trained
    (tmp_path / "s.txt").write_text(verses[0] + "\n", encoding="utf-8")
    (tmp_path / "t.txt").write_text(verses[1] + "\n", encoding="utf-8")
    assert aayn(["translate", "--model", str(exported), "--show-attention", "x.png", verses[0]]) == 2
    assert f"--model {exported} is an ONNX model (`aayn export`): it translates without --show_attention" in (
        capsys.readouterr().err
    )
    assert aayn(["translate", "--model", str(exported), "--device", "cuda", verses[0]]) == 2
    assert "aayn runs ONNX folders on cpu" in capsys.readouterr().err
    for command in (
        ["translate", verses[0]],
        ["score", "--source", tmp_path / "s.txt", "--target", tmp_path / "t.txt"],
    ):
        assert aayn([command[0], "--model", str(exported), "--print_alignment", "hard", *map(str, command[1:])]) == 2
        error = capsys.readouterr().err
        assert f"--model {exported} is an ONNX model (`aayn export`): it translates without --print_alignment" in error
        assert "Traceback" not in error
