"""`aayn` commands without paying the imports each time: one process imports torch, transformers and aayn once,
and every command, run by a shell as written, starts a child forked from it (a `fork` after the imports, before any
thread). The shell finds a small `aayn` script on its PATH that hands the command's argument list, working folder,
environment and its own stdin, stdout and stderr to the server over a Unix socket, and exits with the child's
status. Importing takes ~8 of the ~9.5 seconds of a one-sentence `aayn translate` on a 2-core CI machine."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

SERVER = """
import json, os, socket, sys, traceback
import torch
from transformers import AutoTokenizer, GenerationMixin, PreTrainedModel
import aayn.cli

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen()
print("ready", flush=True)
while True:
    connection, _ = listener.accept()
    _, fds, _, _ = socket.recv_fds(connection, 1, 3)
    request = json.loads(connection.makefile("rb").read())
    child = os.fork()
    if child == 0:
        listener.close()
        connection.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["aayn", *request["argv"]]
        code = 1
        try:
            code = aayn.cli.main(request["argv"]) or 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            coverage = sys.modules.get("coverage")  # under pytest-cov: os._exit skips coverage's save at exit
            measuring = coverage and coverage.Coverage.current()
            if measuring:
                measuring.stop()
                measuring.save()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    _, status = os.waitpid(child, 0)
    connection.sendall(str(os.waitstatus_to_exitcode(status)).encode())
    connection.close()
"""

CLIENT = """#!{python} -S
import json, os, socket, sys
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect({socket!r})
socket.send_fds(client, [b"x"], [0, 1, 2])
client.sendall(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode())
client.shutdown(socket.SHUT_WR)
sys.exit(int(client.makefile().read() or 1))
"""


@contextlib.contextmanager
def forked_aayn(folder: Path, env: dict):
    """A folder holding an `aayn` script that runs each command in a child of one preloaded process (started with
    `env`, the environment the commands get); put it first on the commands' PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    address = str(folder / "aayn.socket")
    server = subprocess.Popen([sys.executable, "-c", SERVER, address], env=env, stdout=subprocess.PIPE, text=True)
    try:
        script = folder / "aayn"
        script.write_text(CLIENT.format(python=sys.executable, socket=address), encoding="utf-8")
        script.chmod(0o755)
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the aayn fork server did not start (exit status {server.wait()})")
        yield folder
    finally:
        server.kill()
        server.wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)
