"""An agent script run again and again, each time in a new process forked from one that has
imported what the script imports: for the crash matrices (`crashes.run_until_done`), which
restart their agent after every SIGKILL, thirty to forty times a corner.

    with ForkServer(script, env) as agents:
        done = agents.run("checkpoints.sqlite", "0", "50", timeout=900)

A fresh interpreter spends one to three seconds of CPU importing a framework (LangGraph with
LangChain, the OpenAI Agents SDK, Pydantic AI) before the agent runs a line; here the server
pays that once. Each run is still a new process that starts the script from its first line
(`runpy.run_path` as `__main__`, with `sys.argv` and the environment the script would have had),
so the agent keeps nothing from an earlier run: it resumes from what it saved, as a restarted
process does. Only the modules the script imports at its top level are imported beforehand, and
the server refuses to fork once any of them has started a thread.

The server is this file run as a script, `python forkserver.py SCRIPT`, with the environment of
the runs; it reads one JSON line per run (`args`, and the files for the run's stdout and
stderr) and answers with the run's pid, then its exit status (-9: SIGKILLed).
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import runpy
import select
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class ForkServer:
    """The client side: start the server for `script` with `env`, then `run` it as often as
    needed; each run answers as `subprocess.run(…, capture_output=True, text=True)` would."""

    def __init__(self, script: Path, env: dict[str, str]) -> None:
        self.script = Path(script)
        self._scratch = tempfile.TemporaryDirectory(prefix="forkserver-")
        self._runs = 0
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(self.script)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(Path(self._scratch.name) / "server.log", "w"),  # noqa: SIM115
            text=True,
        )
        assert self._read(None) == {"ready": True}, self._server_log()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        self._runs += 1
        out, err = (Path(self._scratch.name) / f"{self._runs}.{n}" for n in ("out", "err"))
        self._send({"args": list(args), "stdout": str(out), "stderr": str(err)})
        pid = self._read(10)["pid"]
        try:
            code = self._read(timeout)["returncode"]
        except TimeoutError:
            os.kill(pid, 9)
            self._read(10)
            raise subprocess.TimeoutExpired([str(self.script), *args], timeout) from None
        return subprocess.CompletedProcess(
            [str(self.script), *args], code, out.read_text(), err.read_text()
        )

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(30)
        self._scratch.cleanup()

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def _read(self, timeout: float | None) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError
        line = self.process.stdout.readline()
        assert line, f"the fork server ended: {self._server_log()}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _server_log(self) -> str:
        return (Path(self._scratch.name) / "server.log").read_text()[-3000:]


# --- The server -------------------------------------------------------------------------------


def top_level_imports(script: Path) -> list[str]:
    """The modules `script` imports at its top level (not `__future__`)."""
    names = []
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__":
            names.append(str(node.module))
    return names


def child(script: Path, request: dict[str, Any]) -> None:
    """In the forked process: the run's output files as stdout and stderr, the script's argv,
    then the script from its first line. Returns (to exit as the interpreter would) unless the
    script SIGKILLs itself."""
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(os.devnull)  # noqa: SIM115 (the server's requests are not the script's)
    sys.argv = [str(script), *request["args"]]
    runpy.run_path(str(script), run_name="__main__")


def serve(script: Path) -> None:
    # As `python SCRIPT` would: the script's directory first on the path.
    sys.path[0] = str(script.parent)
    for name in top_level_imports(script):
        importlib.import_module(name)
    reply = sys.stdout
    print(json.dumps({"ready": True}), file=reply, flush=True)
    for line in sys.stdin:
        if threading.active_count() != 1:
            raise RuntimeError(f"threads before fork: {threading.enumerate()}")
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(script, request)
            sys.exit(0)  # exceptions leave as the interpreter's own exit would: status 1
        print(json.dumps({"pid": pid}), file=reply, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), file=reply, flush=True)


if __name__ == "__main__":
    serve(Path(sys.argv[1]).resolve())
