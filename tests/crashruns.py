"""The crash test as a user runs it (`manage.py crashtest`, `make crashtest`), in a process of
its own, its report read back: for tests/test_crashtest*.py, a file per kind of run so that
the workers of `make test` share them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

# The run's own Redis database (emptied first); another one where several people share a Redis.
REDIS_DB = os.environ.get("CRASHTEST_REDIS_DB", "14")


def crashtest(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            *(sys.executable, "manage.py", "crashtest"),
            *("--report", str(report), "--redis-db", REDIS_DB, *args),
        ],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if not report.exists():
        # The run stopped before its verdict: say why, from its own last words and its logs'.
        logs = sorted((tmp_path / "crashtest-logs").glob("*.log"))
        tails = "".join(f"--- {log.name} (tail)\n{_tail(log)}\n" for log in logs)
        raise AssertionError(
            f"crashtest exited {done.returncode} without a report\n"
            f"--- stdout (tail)\n{done.stdout[-3000:]}\n--- stderr (tail)\n{done.stderr[-3000:]}\n"
            f"{tails}"
        )
    return done.returncode, json.loads(report.read_text()), done.stdout


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
