"""aayn translate: arguments or standard input in, one line out per line in, in order; attention heatmaps."""

import io
import logging
import sys

import pytest
from cli_helpers import translate_fails

from aayn.cli import main as aayn
from aayn.formats.aayn.engine import TorchTranslator

LINES = ["Six one eight.", "", "Two.", "Zero nine nine five three two one.", "   ", "Seven."]


def one_by_one(model, tokenizer, texts, **generate):
    """The reference: each sentence alone, straight through generate (no batching, no sorting)."""
    outputs = []
    for text in texts:
        if not text.strip():
            outputs.append("")
            continue
        ids = model.generate(**tokenizer([text], return_tensors="pt"), **generate)
        outputs.append(tokenizer.decode(ids[0], skip_special_tokens=True).strip())
    return outputs


def test_token_batches_keep_order_and_equal_one_by_one_decoding(saved):
    _, model, tokenizer = saved
    expected = one_by_one(model, tokenizer, LINES, max_new_tokens=8, num_beams=2)
    translator = TorchTranslator([model], tokenizer)
    for batch_tokens in (8, 30, 4096):  # from one sentence per batch to all in one
        assert translator.translate(LINES, batch_tokens=batch_tokens, max_new_tokens=8, num_beams=2) == expected


def test_standard_input_line_by_line(saved, monkeypatch, capsys):
    path, model, tokenizer = saved
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(("\n".join(LINES) + "\n").encode())))
    assert aayn(["translate", "--model", str(path), "--max_new_tokens", "8", "--batch_tokens", "20"]) == 0
    printed = capsys.readouterr().out.split("\n")
    assert printed[:-1] == one_by_one(model, tokenizer, LINES, max_new_tokens=8) and printed[-1] == ""
    assert printed[1] == "" and printed[4] == ""  # empty lines stay empty lines


def test_arguments_and_generate_options(saved, capsys):
    path, model, tokenizer = saved
    assert (
        aayn(
            [
                "translate",
                "--model",
                str(path),
                "--num_beams",
                "3",
                "--length_penalty",
                "0.6",
                "--max_new_tokens",
                "6",
                LINES[0],
                LINES[2],
            ]
        )
        == 0
    )
    expected = one_by_one(model, tokenizer, [LINES[0], LINES[2]], num_beams=3, length_penalty=0.6, max_new_tokens=6)
    assert capsys.readouterr().out.splitlines() == expected


def test_show_attention_draws_a_heatmap(saved, tmp_path, capsys):
    path, model, tokenizer = saved
    for flags, name in (([], "mean.png"), (["--per_head"], "heads.png")):  # beside the old --show-attention
        assert (
            aayn(
                [
                    "translate",
                    "--model",
                    str(path),
                    "--max_new_tokens",
                    "6",
                    "--show-attention",
                    str(tmp_path / name),
                    *flags,
                    LINES[0],
                ]
            )
            == 0
        )
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.splitlines()[0] == one_by_one(model, tokenizer, [LINES[0]], max_new_tokens=6)[0]


def test_errors(saved, tmp_path, monkeypatch, capsys):
    path, _, _ = saved
    assert "no such folder" in translate_fails(capsys, "--model", str(tmp_path / "nowhere"), "Hello.")
    assert "no config.json in the folder" in translate_fails(capsys, "--model", str(tmp_path), "Hello.")
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(b"caf\xe9\n"), encoding="utf-8", errors="surrogateescape")
    )
    assert "standard input line 1 is not UTF-8 text" in translate_fails(capsys, "--model", str(path))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"One.\nTwo.\r\nab\xff\n")))
    assert "standard input line 3 is not UTF-8 text (invalid start byte at byte 3)" in translate_fails(
        capsys, "--model", str(path)
    )
    error = translate_fails(capsys, "--model", str(path), "One.", "a\udcffb")  # argv's undecodable byte
    assert "sentence 2 holds a lone surrogate U+DCFF at character 2" in error
    error = translate_fails(capsys, "--model", str(path), "--show-attention", str(tmp_path / "x.png"), "One.", "Two.")
    assert "--show_attention draws one sentence; got 2 lines" in error


def test_one_line_out_per_line_in_even_when_a_translation_holds_a_newline(saved, monkeypatch, capsys):
    path, _, _ = saved
    monkeypatch.setattr(
        "aayn.formats.aayn.engine.TorchTranslator.nbest", lambda self, texts, n, **kw: [[(0.0, "a\nb")]] * len(texts)
    )
    assert aayn(["translate", "--model", str(path), "One.", "Two."]) == 0
    assert capsys.readouterr().out.splitlines() == ["a b", "a b"]


def test_a_local_looking_name_that_does_not_exist_is_no_such_folder_not_a_network_error(tmp_path, monkeypatch, capsys):
    """`runs/nothere` beside a `runs` folder, `./nodata`: a typo of a local path, named as one."""
    from aayn.data import load_translation_dataset

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert "--model runs/nothere: no such folder" in translate_fails(capsys, "--model", "runs/nothere", "Hello.")
    assert "--model ./nothere: no such folder" in translate_fails(capsys, "--model", "./nothere", "Hello.")
    # without a `runs` folder here, `runs/nothere` may be a Hub id: transformers asks the Hub (offline: an error
    # of two lines about connecting); the answer names both places looked in, in one line
    (tmp_path / "runs").rmdir()

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your connection.")

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", offline)
    error = translate_fails(capsys, "--model", "runs/nothere", "Hello.")
    assert "--model runs/nothere: no such folder here, nor a model of that name on the Hub (We couldn't" in error
    assert "Check your connection" not in error
    (tmp_path / "runs").mkdir()
    for name in ("./nodata", "runs/nodata", "~/surely-not-a-folder-here"):
        with pytest.raises(FileNotFoundError, match=f"dataset {name}: no such folder"):
            load_translation_dataset(name, source_lang="en", target_lang="fr")


def test_inference_commands_show_no_loading_bar_unless_verbose(saved, capsys):
    """transformers 5.x draws "Loading weights" on every from_pretrained: the inference commands hide it."""
    from transformers.utils import logging as transformers_logging

    path, _, _ = saved
    try:
        assert aayn(["translate", "--model", str(path), "--max_new_tokens", "3", "Two."]) == 0
        assert "Loading weights" not in capsys.readouterr().err
        assert not transformers_logging.is_progress_bar_enabled()
        assert aayn(["translate", "--verbose", "--model", str(path), "--max_new_tokens", "3", "Two."]) == 0
    finally:
        transformers_logging.enable_progress_bar()


def test_standard_input_is_answered_line_by_line_as_it_arrives(saved):
    """Behind a pipe fed one line at a time (as a terminal or fairseq-interactive's users feed it), each
    line's translation comes back before the next line is written; the answers equal the batched ones."""
    import os
    import subprocess
    import threading

    path, model, tokenizer = saved
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    command = [sys.executable, "-c", "import sys; from aayn.cli import main; sys.exit(main())"]
    command += ["translate", "--model", str(path), "--max_new_tokens", "8"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    watchdog = threading.Timer(120, process.kill)  # a command that waits for the end of its input never answers
    watchdog.start()
    answers = []
    try:
        for line in LINES:
            process.stdin.write(line + "\n")
            process.stdin.flush()
            answers.append(process.stdout.readline().rstrip("\n"))  # blocks until this line is answered
        process.stdin.close()
        assert process.wait(timeout=120) == 0 and process.stdout.read() == ""
    finally:
        watchdog.cancel()
        process.kill()
    assert answers == one_by_one(model, tokenizer, LINES, max_new_tokens=8)


@pytest.mark.parametrize("buffer_size", [None, 2])
def test_input_batches_take_what_is_there_at_most_buffer_size(tmp_path, buffer_size):
    from aayn.cli.translate import input_batches

    lines = ["one", "", "two", "three", "four"]
    (tmp_path / "in.txt").write_bytes(("\n".join(lines) + "\n").encode())
    with open(tmp_path / "in.txt", "rb") as stream:  # a file: everything is there to read at once
        batches = list(input_batches(stream, buffer_size))
    assert [line for batch in batches for line in batch] == lines
    assert [len(batch) for batch in batches] == ([5] if buffer_size is None else [2, 2, 1])
    (tmp_path / "in.txt").write_bytes(b"no newline at the end")
    with open(tmp_path / "in.txt", "rb") as stream:
        assert list(input_batches(stream, buffer_size)) == [["no newline at the end"]]


@pytest.mark.parametrize("progress", [None, "translating test"])
def test_a_progress_bar_shows_where_asked_once_the_work_takes_a_second(saved, monkeypatch, capsys, progress):
    """`aayn evaluate` asks for one; a quick call shows none (tqdm's delay)."""
    import time

    _, model, tokenizer = saved
    generate = model.generate
    monkeypatch.setattr(model, "generate", lambda *a, **kw: time.sleep(0.4) or generate(*a, **kw))
    texts = TorchTranslator([model], tokenizer).translate(LINES, batch_tokens=8, max_new_tokens=4, progress=progress)
    assert len(texts) == len(LINES)
    error = capsys.readouterr().err
    assert ("translating test" in error and "sentences" in error) == (progress is not None), error
    monkeypatch.undo()  # a call of milliseconds
    TorchTranslator([model], tokenizer).translate(LINES[:1], max_new_tokens=4, progress="quick")
    assert "quick" not in capsys.readouterr().err


def test_translating_and_scoring_warn_nothing_about_padding(saved):
    """transformers 4.57 warns on every call of a fast tokenizer's `pad` that it is slower than `__call__`; its own
    collators pad without the warning, and so do aayn's batches."""
    from transformers import AutoTokenizer

    from aayn.translation.scoring import score_texts

    path, model, _ = saved
    tokenizer = AutoTokenizer.from_pretrained(path)  # fresh: the warning is given once per tokenizer
    records = []
    handler = logging.Handler()
    handler.emit = records.append  # transformers' loggers do not propagate past "transformers"
    logging.getLogger("transformers").addHandler(handler)
    try:
        TorchTranslator([model], tokenizer).translate(LINES, max_new_tokens=4)
        score_texts(model, tokenizer, ["One."], ["Un."])
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert not [r.getMessage() for r in records if "PreTrainedTokenizerFast" in r.getMessage()]


def test_translating_imports_no_dataset_library():
    """`aayn translate` does not import datasets, pandas and pyarrow (about a second), which it never uses."""
    import subprocess

    code = "import sys, aayn.cli, aayn.formats.aayn.engine, aayn.checks, aayn.translation.scoring; "
    code += "print(sorted(m for m in ('datasets', 'pandas', 'pyarrow', 'evaluate') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.stdout.strip() == "[]", result.stderr[-2000:]


def test_long_inputs_warn_once(saved, caplog):
    _, model, tokenizer = saved
    long_text = " ".join(["Six one eight."] * 40)  # far over the tokenizer's 32 and the model's 64 positions
    with caplog.at_level("WARNING"):
        TorchTranslator([model], tokenizer).translate([long_text, long_text, "Two."], max_new_tokens=70, num_beams=1)
    truncated = [r for r in caplog.records if "longer than" in r.getMessage()]  # ours only, not one per input
    positions = [r for r in caplog.records if "exceeds max_position_embeddings" in r.getMessage()]
    assert len(truncated) == 1 and "2 input(s)" in truncated[0].getMessage()
    assert len(positions) == 1
