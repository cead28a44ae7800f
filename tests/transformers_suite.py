"""transformers' own common model tests, from the source distribution of the installed transformers.

The wheel has no tests; the sdist on the package index carries `tests/test_modeling_common.py`,
`test_configuration_common.py` and (5.x) `test_training_mixin.py`, but not the folders they import from
(`tests/generation/`, `tests/exporters/`, `tests/utils/`): those get the smallest stand-ins below. The files are
unpacked once per transformers version under the running Python's prefix (the CI venv) and imported as the package
`transformers_common_tests`.
"""

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import transformers

PACKAGE = "transformers_common_tests"
SUITE_FILES = ("test_modeling_common.py", "test_configuration_common.py", "test_training_mixin.py")

# What the suite files import from the folders the sdist leaves out. Generation is tested by aayn's own tests
# (tests/test_paper_decoding.py, test_generation.py, test_generate_options.py), against reference searches; the
# export mixin's tests (torch.export of the whole model) are not part of this suite.
STAND_INS = {
    "generation/test_utils.py": (
        '"""Stand-in: transformers\' generation tests are not in its sdist."""\n\n\n'
        "class GenerationTesterMixin:\n    pass\n"
    ),
    "exporters/test_export.py": (
        '"""Stand-in: transformers\' export tests are not in its sdist."""\n\n\nclass ExportTesterMixin:\n    pass\n'
    ),
    "utils/test_configuration_utils.py": (
        '"""Stand-in: common configuration arguments, each set to a value other than its default."""\n\n'
        "config_common_kwargs = {\n"
        '    "return_dict": False,\n'
        '    "output_hidden_states": True,\n'
        '    "output_attentions": True,\n'
        '    "tie_word_embeddings": False,\n'
        '    "is_encoder_decoder": True,\n'
        '    "id2label": {0: "A", 1: "B"},\n'
        '    "label2id": {"A": 0, "B": 1},\n'
        '    "problem_type": "regression",\n'
        "}\n"
    ),
}


def suite_folder() -> Path:
    """Where the suite for the installed transformers lies (a folder holding the package), fetched if absent."""
    version = transformers.__version__
    root = Path(os.environ.get("AAYN_TRANSFORMERS_TESTS", Path(sys.prefix) / "transformers-common-tests")) / version
    if (root / PACKAGE / "__init__.py").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as scratch:
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
            + ["--dest", scratch, f"transformers=={version}"],
            capture_output=True,
            text=True,
        )
        archives = list(Path(scratch).glob("transformers-*.tar.gz"))
        if download.returncode or not archives:
            raise RuntimeError(
                f"could not download the source distribution of transformers=={version} "
                f"(pip download: {download.stderr.strip().splitlines()[-1:] or download.returncode})"
            )
        staged = Path(scratch) / "staged"
        package = staged / PACKAGE
        package.mkdir(parents=True)
        with tarfile.open(archives[0]) as archive:
            for name in SUITE_FILES:
                member = f"transformers-{version}/tests/{name}"
                try:
                    source = archive.extractfile(member)
                except KeyError:
                    continue  # test_training_mixin.py is new in 5.x
                (package / name).write_bytes(source.read())
        for name, text in STAND_INS.items():
            path = package / name
            path.parent.mkdir(exist_ok=True)
            (path.parent / "__init__.py").touch()
            path.write_text(text)
        (package / "__init__.py").touch()
        try:
            staged.rename(root)  # whole or not at all; a concurrent fetch may have won
        except OSError:
            if not (root / PACKAGE / "__init__.py").exists():
                raise
        shutil.rmtree(staged, ignore_errors=True)
    return root
