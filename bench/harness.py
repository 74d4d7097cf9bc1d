"""What the benchmark scripts share: their databases, Django set up on one, the processes they
start, and stopping cleanly on Ctrl-C or SIGTERM. Tables and result files are in
`bench.report`, CPU accounting in `bench.cpu`.

The scripts run as files (`python bench/lifecycle.py`): each puts the repository root on
`sys.path` before it imports this module as `bench.harness`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from devstack.provision import database_name, database_url, drop_database, fresh_database

ROOT = Path(__file__).resolve().parent.parent
Options = TypeVar("Options")


# --- Databases -------------------------------------------------------------------------------


def bench_database(base_url: str, suffix: str) -> str:
    """The database a benchmark runs in: `<DATABASE_URL's database>_<suffix>`."""
    return f"{database_name(base_url)}_{suffix}"


def bench_env(url: str, **extra_env: str) -> dict[str, str]:
    """The environment for manage.py, servers and in-process Django on database `url`: quiet,
    not in debug mode (debug keeps every query in memory)."""
    return {
        **os.environ,
        "DATABASE_URL": url,
        **extra_env,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }


def fresh_bench_database(
    base_url: str, name: str, agents: Sequence[str], **extra_env: str
) -> tuple[dict[str, str], list[str]]:
    """Database `name` created afresh, migrated, with the tools of tools.toml and `agents`.
    Returns the environment for manage.py and the servers (`extra_env` added), and the
    agents' API keys."""
    return fresh_database(bench_env(base_url, **extra_env), name, agents=agents)


def kept_database_env(base_url: str, name: str) -> dict[str, str]:
    """The environment for database `name` that an earlier run kept (--keep-db)."""
    return bench_env(database_url(base_url, name))


# Every column of ledger_effect, in the order the benchmarks' generated rows give them: their
# `INSERT INTO ledger_effect ({EFFECT_COLUMNS}) SELECT …` fails loudly when a migration adds one.
EFFECT_COLUMNS = """
    id, agent_id, effect_key, run_id, step_id, seq, kind, tool, target, request, request_hash,
    idempotency_key, status, attempt, max_attempts, lease_owner, lease_token, claim_id,
    lease_seconds, lease_expires_at, next_check_at, checks, left_dispatch_at, confirm_deadline,
    provider_ref, response, error, outcome_digest, outcome_token, parent_id, provenance,
    created_at, updated_at, resolved_at, version
"""


def drop_quietly(base_url: str, name: str) -> None:
    try:
        drop_database(base_url, name)
    except Exception as exc:  # the run's result matters more than the cleanup
        print(f"could not drop {name}: {exc}", file=sys.stderr)


# --- Django in this process ------------------------------------------------------------------


def setup_django(env: dict[str, str]) -> None:
    """Django on the benchmark's database, set up as a gunicorn worker is: whatever config.wsgi
    does at start-up (django.setup(), and anything added there later, such as gc.freeze())
    shapes the measured work too."""
    # WhiteNoise warns once that collectstatic has not run: nothing here serves static files.
    warnings.filterwarnings("ignore", message="No directory at")
    os.environ.update(env)
    import config.wsgi  # noqa: F401


def sql_rows(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def sql_exec(sql: str, params: Any = None) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


# --- Processes we start ----------------------------------------------------------------------


def stop_group(proc: subprocess.Popen[Any], *, grace: float = 10.0) -> None:
    """Stop a process started with `start_new_session=True`, and everything in its group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    # Workers may outlive a master that died: kill whatever is left in the group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


# --- Entry point -----------------------------------------------------------------------------


def _terminate(signum: int, frame: Any) -> None:
    print(f"signal {signum}: stopping what this benchmark started", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


def run_stoppable(run: Callable[[], int], *, restore_sigint: bool = False) -> int:
    """`run()`'s exit status, or 130 after Ctrl-C. SIGTERM unwinds like Ctrl-C, so every
    `finally` stops what it started. `restore_sigint`: Ctrl-C raises KeyboardInterrupt even
    when started from a shell that ignores SIGINT."""
    signal.signal(signal.SIGTERM, _terminate)
    if restore_sigint:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run()
    except KeyboardInterrupt:
        print("interrupted: stopped what this benchmark started", file=sys.stderr)
        return 130


def options_from(args: argparse.Namespace, options: type[Options]) -> Options:
    """The options dataclass filled from the parsed arguments of the same names."""
    return options(**{f.name: getattr(args, f.name) for f in dataclasses.fields(options)})


def script_main(
    parse_args: Callable[[list[str]], Options], benchmark: Callable[[Options], int]
) -> int:
    """A benchmark script's entry point: its options from the command line, then the run."""
    opts = parse_args(sys.argv[1:])
    return run_stoppable(lambda: benchmark(opts), restore_sigint=True)


def code_version() -> str:
    """The commit measured, and whether product files had uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    return f"{head} + {len(changed)} changed files" if changed else head


class LineChild:
    """A worker process spoken to in lines: commands go to its stdin, answers come back as
    stdout lines with a known prefix (it may print others), and its stderr is kept for the
    message when it dies. Closing its stdin asks it to finish. The DBOS contenders of the
    lifecycle and payment benches run this way, DBOS launched once per process."""

    def __init__(self, argv: Sequence[str], failure: type[Exception]) -> None:
        self.failure = failure
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(
            list(argv),
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,  # Ctrl-C reaches the parent, which then stops it
        )
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def line(self, prefix: str, timeout: float) -> str:
        """The next stdout line starting with `prefix`, without it."""
        assert self.proc.stdout is not None
        timer = threading.Timer(timeout, lambda: stop_group(self.proc, grace=1))
        timer.start()
        try:
            for line in self.proc.stdout:
                if line.startswith(prefix):
                    return line.removeprefix(prefix).strip()
        finally:
            timer.cancel()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        tail = "".join(self.stderr[-15:]).strip() or f"exit status {self.proc.returncode}"
        raise self.failure(f"the worker process stopped: {tail}")

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise self.failure(f"the worker process is gone: {exc}") from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # the worker's cue to finish
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(15)
        stop_group(self.proc, grace=2)
