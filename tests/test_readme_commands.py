"""Every shell command of the README runs as written: extracted from its ```bash blocks and run by bash in order
of need in a scratch folder, training commands with a step cap appended (a few steps, a few verses), so a README
that drifts from the code fails the build. The few that cannot run here are listed with the reason. The main
command runs the installed `aayn` as a user's shell would; the others find an `aayn` on the PATH that runs them in a
child forked from one process that imported torch, transformers and aayn once (tests/fork_server.py): the
commands, their arguments, redirections and files are the README's, without ~8 s of imports each."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from fork_server import forked_aayn
from tiny_models import ONCE_ACROSS_LINES

ROOT = Path(__file__).resolve().parents[1]
# what cannot run here, and why; anything else the README shows must run
NOT_HERE = {
    "bash .ci/run": "CI itself: it runs this suite",
    "accelerate launch --multi_gpu --num_processes 8": "8 GPUs and the Hub's wmt/wmt14",
    "accelerate launch --config_file recipes/accelerate/fsdp2.yaml": "GPUs (on CPU Accelerate runs it as DDP): "
    "tests/test_fsdp.py shards as it does under torchrun",
    "torchrun --nnodes 2": "two machines: tests/test_training_processes.py runs it as two launchers on this one",
    "aayn serve": "a server runs until stopped: tests/test_serve.py starts one and asks it over HTTP",
    "curl -s localhost:8000/translate": "asks the server above: tests/test_libretranslate.py asks one the same way",
}
SETUP = re.compile(r"^(python3 -m venv|\. \.venv/bin/activate|pip install)")  # what .ci/run does before the suite
# appended to every training (and preprocess) command: the flags win over the recipe, as a user's would
STEP_CAP = ["--max_steps", "4", "--save_steps", "2", "--eval_steps", "2", "--max_train_samples", "300"]
STEP_CAP += ["--max_eval_samples", "4", "--max_predict_samples", "4", "--num_examples_to_print", "1"]
SAMPLE_CAP = ["--max_samples", "4"]  # aayn evaluate scores 4 verses, not 1,116
MAIN = "aayn train recipes/demo.yaml"  # the README's main command: run by the installed `aayn` itself
ENGLISH = ["In the beginning God created the heavens and the earth.", "Jesus wept.", "The LORD is my shepherd."]


def readme_commands(path: Path = ROOT / "README.md") -> list[str]:
    """The commands of the file's bash blocks, one per line, each `&&` chain split, setup steps left out."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL):
        for line in block.splitlines():
            for part in line.split(" && "):
                part = part.strip()
                words = shlex.split(part, comments=True)
                if part and not SETUP.match(part) and words not in [shlex.split(c, comments=True) for c in commands]:
                    commands.append(part)  # once: "aayn train recipes/demo.yaml  # the main job above" repeats it
    return commands


def stage(command: str) -> int:
    """Commands that make what others read run first: preparing data, training, then export and averaging, then the
    rest."""
    words = shlex.split(command, comments=True)
    if words[:2] == ["aayn", "preprocess"]:
        return -1
    if words[:2] == ["aayn", "train"] or words[0] in ("torchrun", "accelerate"):
        return 0 if "--model_name_or_path" not in words else 1
    return 2 if words[:2] in (["aayn", "export"], ["aayn", "average"]) else 3


def capped(command: str) -> str:
    words = shlex.split(command, comments=True)
    code = command.split("  #")[0].rstrip() if "  #" in command else command
    if "aayn.train" in words or words[:2] in (["aayn", "train"], ["aayn", "preprocess"]):
        code += " " + " ".join(STEP_CAP)
    elif words[:2] == ["aayn", "evaluate"]:
        code += " " + " ".join(SAMPLE_CAP)
    return code


@ONCE_ACROSS_LINES  # a fresh install, as the README sets one up, gets the newest line
def test_every_readme_command_runs_as_written(tmp_path):
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    (tmp_path / "english.txt").write_text("".join(f"{line}\n" for line in ENGLISH), encoding="utf-8")
    (tmp_path / "prefixes.txt").write_text("Au commencement\n\nL'Éternel\n", encoding="utf-8")
    (tmp_path / "terms.tsv").write_text("LORD\tÉternel\nshepherd\tberger\n", encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # this environment's aayn, torchrun
    with forked_aayn(tmp_path / "forked", env) as forked:
        forked_env = dict(env, PATH=f"{forked}{os.pathsep}{env['PATH']}")
        run_commands_in_order(tmp_path, env, forked_env)
    assert len((tmp_path / "french.txt").read_text(encoding="utf-8").splitlines()) == len(ENGLISH)
    assert (tmp_path / "alignment.png").stat().st_size > 0 and (tmp_path / "runs" / "avg" / "config.json").is_file()


def run_commands_in_order(folder: Path, env: dict, forked_env: dict) -> None:
    commands = readme_commands()
    assert MAIN in commands  # from its setup chain
    assert sum(command.startswith("aayn translate") for command in commands) >= 5
    assert not any(SETUP.match(command) for command in commands)
    skipped = [c for c in commands if any(c.startswith(prefix) for prefix in NOT_HERE)]
    assert len(skipped) == len(NOT_HERE)  # each exemption still names a README command
    for command in sorted((c for c in commands if c not in skipped), key=stage):  # stable: README order within
        command_env = env if command == MAIN else forked_env
        result = subprocess.run(
            ["bash", "-c", capped(command)], cwd=folder, env=command_env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
        assert "Traceback" not in result.stderr, f"{command}\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("command", sorted(NOT_HERE))
def test_what_cannot_run_here_is_still_in_the_readme(command):
    assert any(line.startswith(command) for line in readme_commands()), f"drop {command!r} from NOT_HERE"
