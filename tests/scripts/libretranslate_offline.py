"""LibreTranslate serving aayn models, on loopback with no network: export Argos Translate packages with aayn,
install them into a fresh packages folder with LibreTranslate's own Argos Translate, start LibreTranslate, POST
/translate, and compare the answer with aayn's CTranslate2 export decoded with Argos's settings (beam 4, length
penalty 0.2). LibreTranslate pins Flask and numpy, so it runs from a venv of its own:

    python3 -m venv /tmp/libre && /tmp/libre/bin/pip install torch==2.13.0 && /tmp/libre/bin/pip install libretranslate
    python tests/scripts/libretranslate_offline.py --libre_python /tmp/libre/bin/python \\
        --model runs/spm-en-fr --reverse_model runs/spm-fr-en

Two packages: LibreTranslate 1.9 fetches the package index at start whenever fewer than two are installed
(`libretranslate.init.check_and_install_models`), which fails offline. Translating, Argos Translate first splits
the text into sentences with MiniSBD, which downloads its model from github.com/LibreTranslate/MiniSBD at first use:
offline every /translate answers 500 (URLError in `minisbd.models.get_model_file`). `--whole_sentences` starts
LibreTranslate with that splitter replaced by one that keeps each text whole (a `sitecustomize` on its path), as
for one-sentence texts MiniSBD would. Prints what it did and what it got; exits 1 if LibreTranslate does not answer
with aayn's translation.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

TEXTS = ["In the beginning God created the heavens and the earth.", "Jesus wept.", "God is love."]


def post(url: str, body: dict, timeout: float = 120) -> tuple[int, str]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def libretranslate_env(work: Path, whole_sentences: bool) -> dict:
    """LibreTranslate's environment in `work`: its own packages and data folders; with `whole_sentences` a
    `sitecustomize` that keeps each text whole instead of MiniSBD (which downloads its model at first use)."""
    env = dict(os.environ, ARGOS_PACKAGES_DIR=str(work / "packages"), XDG_DATA_HOME=str(work / "data"),
               XDG_CACHE_HOME=str(work / "cache"), XDG_CONFIG_HOME=str(work / "config"))  # fmt: skip
    if whole_sentences:
        (work / "site").mkdir(parents=True, exist_ok=True)
        (work / "site" / "sitecustomize.py").write_text(
            "import argostranslate.sbd\n"
            "argostranslate.sbd.MiniSBDSentencizer.split_sentences = lambda self, text: [text]\n"
        )
        env["PYTHONPATH"] = str(work / "site")
    return env


def start_libretranslate(
    libre_python: str, models: list[str], work: Path, whole_sentences: bool, *flags: str, files: bool = False
):
    """Export `models` (aayn folders of both directions) as Argos packages, install them with LibreTranslate's own
    Argos Translate, and start LibreTranslate on a free loopback port (`files`: with its file translation): (process,
    url, log file), or (None, None, None) with what went wrong printed."""
    from aayn.cards import card_metadata
    from aayn.formats import export_model

    work.mkdir(parents=True, exist_ok=True)
    env = libretranslate_env(work, whole_sentences)
    packages, codes = [], []
    for folder in models:
        meta = card_metadata(folder)
        path = work / f"{meta['source_lang']}_{meta['target_lang']}.argosmodel"
        if not path.exists():
            export_model(folder, path, format="argos")
        packages.append(path)
        codes += [meta["source_lang"], meta["target_lang"]]
        print(f"exported {folder} -> {path} ({path.stat().st_size / 1e6:.1f} MB)")
    install = "import sys, argostranslate.package as p\nfor path in sys.argv[1:]: p.install_from_path(path)\n"
    subprocess.run([libre_python, "-c", install, *map(str, packages)], check=True, env=env)
    port = free_port()
    command = [libre_python, "-m", "libretranslate.main", "--host", "127.0.0.1", "--port", str(port),
               "--load-only", ",".join(sorted(set(codes))), "--disable-web-ui",
               *([] if files else ["--disable-files-translation"]), *flags]  # fmt: skip
    log = open(work / "libretranslate.log", "w")  # noqa: SIM115 (the server's, closed by the caller)
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    print(f"started: {' '.join(command)} (log: {work / 'libretranslate.log'})")
    deadline = time.monotonic() + 300
    while True:
        if server.poll() is not None:
            print(f"LibreTranslate exited with {server.returncode}:\n{(work / 'libretranslate.log').read_text()}")
            return None, None, None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/languages", timeout=5) as response:
                print(f"GET /languages: {response.read().decode()}")
            return server, f"http://127.0.0.1:{port}", log
        except OSError:
            if time.monotonic() > deadline:
                print("LibreTranslate did not answer within 300 s")
                server.terminate()
                return None, None, None
            time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libre_python", required=True, help="the python of a venv with libretranslate")
    parser.add_argument("--model", required=True, help="an aayn folder trained with tokenizer_type: sentencepiece")
    parser.add_argument("--reverse_model", required=True, help="one for the other direction (see above)")
    parser.add_argument("--work", default=tempfile.mkdtemp(prefix="libre-"))
    parser.add_argument("--whole_sentences", action="store_true", help="no MiniSBD (it needs the network)")
    args = parser.parse_args()
    from aayn.cards import card_metadata
    from aayn.formats import export_model
    from aayn.formats.ctranslate2.engine import ExportedModel

    work = Path(args.work)
    source, target = card_metadata(args.model)["source_lang"], card_metadata(args.model)["target_lang"]
    server, url, log = start_libretranslate(args.libre_python, [args.model, args.reverse_model], work,
                                            args.whole_sentences)  # fmt: skip
    if server is None:
        return 1
    answers = []
    try:
        for text in TEXTS:
            status, body = post(f"{url}/translate", {"q": text, "source": source, "target": target})
            print(f"POST /translate {text!r}: {status} {body}")
            answers.append(json.loads(body).get("translatedText") if status == 200 else None)
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    export_model(args.model, work / "ct2")
    ours = ExportedModel(work / "ct2").translate(TEXTS, num_beams=4, length_penalty=0.2)
    print(f"aayn's CTranslate2 export, beam 4, length penalty 0.2: {json.dumps(ours, ensure_ascii=False)}")
    # LibreTranslate's own last step: the source's capital and final punctuation carried over, HTML unescaped
    formatting = (
        "import json, sys\nfrom html import unescape\n"
        "from libretranslate.language import improve_translation_formatting as improve\n"
        "pairs = json.loads(sys.argv[1])\nprint(json.dumps([unescape(improve(s, t)) for s, t in pairs]))\n"
    )
    done = subprocess.run([args.libre_python, "-c", formatting, json.dumps(list(zip(TEXTS, ours)))],
                          capture_output=True, text=True, check=True,
                          env=libretranslate_env(work, args.whole_sentences))  # fmt: skip
    ours = json.loads(done.stdout.splitlines()[-1])
    print(f"... formatted as LibreTranslate formats: {json.dumps(ours, ensure_ascii=False)}")
    same = answers == ours
    print("LibreTranslate's answers equal aayn's translations" if same else "LibreTranslate's answers differ")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
