"""Agents for the providers' crash test, each a process that SIGKILLs itself at its point:

    python -m tests.providers.crash_agent PROVIDER PROVIDER_URL NOTES_DIR

It loads the provider's caller (`devstack.crashtest.callers`) and warms it, then reads batches
on stdin, one JSON line each: `{"batch": name, "jobs": [...]}`, a job being a claimed effect
(`effect`: its id and idempotency key, `request`) and the `point` where its agent dies. Each job
runs in a child forked from this process, all of a batch at once; the child calls the provider
through the caller, unless its point says otherwise:

| point  | the child                                                              |
| ------ | ---------------------------------------------------------------------- |
| before | dies with nothing sent (the effect was claimed for it)                 |
| during | sends while the fake holds the request (`hang`), dies meanwhile        |
| after  | sends, notes the provider's answer, dies before anyone reports it      |
| none   | sends and notes the answer, for its caller to report                   |

For each batch the process prints one JSON line: per job, the child's exit status (-9: killed)
and the `answer` it noted. It never speaks to the ledger and never imports Django.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from devstack.crashtest import callers

POINTS = ("before", "during", "after")
HOLD = 1.5  # seconds the fake holds a `during` request before it carries it out
DURING_KILL = 0.5  # seconds after the call starts that a `during` child dies


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Agent:
    def __init__(self, name: str, provider_url: str, notes: Path) -> None:
        self.caller: ModuleType = callers.load(name)
        self.provider_url = provider_url
        self.notes = notes
        callers.warm(self.caller, provider_url)

    def run(self, batch: str, job: dict[str, Any]) -> None:
        """One job, in a forked child: the call, or death at its point."""
        point = job["point"]
        if point == "before":
            die()
        fault = ""
        if point == "during":
            fault = f"hang={HOLD}"
            threading.Timer(DURING_KILL, die).start()
        answer = self.caller.send(self.provider_url, job["effect"], job["request"], fault)
        (self.notes / f"{batch}.{job['job']}.json").write_text(json.dumps(answer))
        if point == "after":
            die()

    def batch(self, batch: str, jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Every job in a child of its own, all at once; how each ended."""
        running: dict[int, str] = {}
        for job in jobs:
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    self.run(batch, job)
                except BaseException:
                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            running[pid] = job["job"]
        ended: dict[str, dict[str, Any]] = {}
        while running:
            pid, status = os.wait()
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            ended[running.pop(pid)] = {"exit": code}
        for name, end in ended.items():
            noted = self.notes / f"{batch}.{name}.json"
            if noted.exists():
                end["answer"] = json.loads(noted.read_text())
        return ended


def main(argv: list[str]) -> int:
    notes = Path(argv[2])
    notes.mkdir(parents=True, exist_ok=True)
    agent = Agent(argv[0], argv[1], notes)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        asked = json.loads(line)
        print(json.dumps(agent.batch(asked["batch"], asked["jobs"])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
