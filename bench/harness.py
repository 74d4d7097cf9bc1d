"""What the benchmark scripts share: their databases, manage.py, the processes they start, CPU
counters from /proc, tables, and stopping cleanly on Ctrl-C or SIGTERM.

The scripts run as files (`python bench/lifecycle.py`): each puts the repository root on
`sys.path` before it imports this module as `bench.harness`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# --- Databases -------------------------------------------------------------------------------


def database_url(url: str, name: str) -> str:
    """`url` pointing at database `name` instead (user, host, port and query kept)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def database_name(url: str) -> str:
    name = urlsplit(url).path.lstrip("/")
    if not name:
        raise SystemExit("DATABASE_URL names no database")
    return name


def bench_database(base_url: str, suffix: str) -> str:
    """The database a benchmark runs in: `<DATABASE_URL's database>_<suffix>`."""
    return f"{database_name(base_url)}_{suffix}"


def _maintenance(url: str) -> Any:
    import psycopg

    return psycopg.connect(database_url(url, "postgres"), autocommit=True)


_DROP_SQL = "DROP DATABASE IF EXISTS {} WITH (FORCE)"


def recreate_database(base_url: str, name: str) -> None:
    from psycopg import sql

    with _maintenance(base_url) as conn:
        conn.execute(sql.SQL(_DROP_SQL).format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(base_url: str, name: str) -> None:
    from psycopg import sql

    with _maintenance(base_url) as conn:
        conn.execute(sql.SQL(_DROP_SQL).format(sql.Identifier(name)))


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def fresh_database(
    base_url: str, name: str, agents: Sequence[str], **extra_env: str
) -> tuple[dict[str, str], list[str]]:
    """Database `name` created afresh, migrated, with the tools of tools.toml and `agents`.
    Returns the environment for manage.py and the servers (`extra_env` added), and the
    agents' API keys."""
    recreate_database(base_url, name)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(base_url, name),
        **extra_env,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }
    manage(env, "migrate", "--verbosity", "0")
    manage(env, "loadtools", "tools.toml")
    keys = [manage(env, "createagent", agent).strip().splitlines()[-1] for agent in agents]
    return env, keys


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


# --- CPU counters from /proc -----------------------------------------------------------------


def machine_ticks() -> tuple[int, int]:
    """(all ticks, busy ticks) of all CPUs together, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return sum(values), sum(values) - values[3] - values[4]


def process_ticks() -> Iterator[tuple[int, str, int, int]]:
    """(pid, comm, process group, user + system ticks) of every process we can read."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2 :].split()
        yield int(entry.name), comm, int(rest[2]), int(rest[11]) + int(rest[12])


# --- Output ----------------------------------------------------------------------------------


def print_grid(
    header: Sequence[str], rows: Sequence[Sequence[Any]], *, right_align: bool = False
) -> None:
    """A table: columns as wide as their widest cell, a rule under the header. The first column
    is aligned left; the others too, or right with `right_align`."""
    table = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for index, row in enumerate(table):
        cells = [row[0].ljust(widths[0])]
        cells += [
            c.rjust(w) if right_align else c.ljust(w)
            for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        print("  ".join(cells))
        if index == 0:
            print("  ".join("-" * w for w in widths))


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
