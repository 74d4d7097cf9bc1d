"""The ledger as the payment-loop benchmark runs it: the web server as `make run` starts it
(gunicorn behind nginx, `devstack.web.web_services`), and the server's own time per call
read from gunicorn's access log.

The server is `devstack.web.web_services` with `make run`'s worker and thread counts
(GUNICORN_WORKERS / GUNICORN_THREADS, default 2 × 4), `PYTHONUNBUFFERED=1`, a fresh
`PROMETHEUS_MULTIPROC_DIR` and `LOG_LEVEL` INFO unless set, as `make run` gives them. The one
addition is gunicorn's access log (`make run` writes none: the application logs each API
request), turned on with `--access-logfile -` and a format whose line carries `%(D)s`,
the microseconds gunicorn spent from reading the request to finishing the response. That is
server time without any change to the product, and it leaves out the client, the network and
the connection.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.harness import ROOT, stop_group
from bench.lifecycle_load import Server, wait_healthy
from bench.payments_loops import INTENT, OUTCOME
from devstack.embedded import free_port
from devstack.web import web_services

MARK = "PAYBENCH-ACCESS"
ACCESS_FORMAT = f"{MARK} %(m)s %(U)s %(s)s %(D)s"


@dataclass
class LedgerServer:
    server: Server
    log: AccessLog
    label: str

    @property
    def base_url(self) -> str:
        return self.server.base_url


@contextlib.contextmanager
def ledger_server(env: dict[str, str], scratch: Path) -> Iterator[LedgerServer]:
    """gunicorn behind nginx serving the ledger on a free port, their output in
    `scratch`/gunicorn.log; stopped, with gunicorn's workers, on exit."""
    workers = os.environ.get("GUNICORN_WORKERS", "2")
    threads = os.environ.get("GUNICORN_THREADS", "4")
    options = ["--chdir", str(ROOT), "--access-logfile", "-", "--access-logformat", ACCESS_FORMAT]
    port = free_port()
    services = web_services(
        "127.0.0.1",
        port,
        workers=workers,
        threads=threads,
        options=options,
        upstream=scratch / "web.sock",
    )
    metrics = scratch / "prometheus"
    metrics.mkdir(exist_ok=True)
    env = {
        **env,
        "PYTHONUNBUFFERED": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics),
        # `make run` logs every API request (ledger.requests, INFO); bench_env's WARNING would
        # spare the ledger that line.
        "LOG_LEVEL": os.environ.get("LOG_LEVEL") or "INFO",
    }
    log_path = scratch / "gunicorn.log"
    procs = []
    with log_path.open("ab") as log:  # appending: the workers' lines never overwrite each other
        for service in services:
            procs.append(
                subprocess.Popen(
                    service.argv,
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    label = f"gunicorn gthread, {workers} workers × {threads} threads, behind nginx"
    server = Server(f"http://127.0.0.1:{port}", procs[0], label + " (as `make run`)")
    try:
        try:
            wait_healthy(server)
        except RuntimeError as exc:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}\n{tail}") from None
        yield LedgerServer(server, AccessLog(log_path), server.label)
    finally:
        for proc in reversed(procs):
            stop_group(proc)


class AccessLog:
    """The ledger calls in gunicorn's output: `(path, status, server ms)` in order. Lines are
    JSON (`LOG_FORMAT=json`, the default) or plain text; both carry the same message."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def offset(self) -> int:
        return self.path.stat().st_size

    def calls(self, start: int) -> list[tuple[str, int, float]]:
        with self.path.open("rb") as log:
            log.seek(start)
            text = log.read().decode(errors="replace")
        calls = []
        for line in text.splitlines():
            message = line
            if line.startswith("{"):
                with contextlib.suppress(ValueError, AttributeError):
                    message = json.loads(line).get("message", "")
            if MARK not in message:
                continue
            words = message[message.index(MARK) :].split()
            if len(words) == 5 and words[1] == "POST":
                with contextlib.suppress(ValueError):
                    calls.append((words[2], int(words[3]), int(words[4]) / 1000))
        return calls

    def server_times(
        self, start: int, skip: int, count: int, timeout: float = 10.0
    ) -> dict[str, list[float]]:
        """Server ms of the `count` POSTs after the first `skip` since `start`, by kind of
        call. gunicorn writes a line just after its response, so the last ones may lag."""
        deadline = time.monotonic() + timeout
        calls = self.calls(start)
        while len(calls) < skip + count and time.monotonic() < deadline:
            time.sleep(0.1)
            calls = self.calls(start)
        times: dict[str, list[float]] = {INTENT: [], OUTCOME: []}
        for path, _status, ms in calls[skip : skip + count]:
            times[OUTCOME if path.endswith("/outcome") else INTENT].append(ms)
        return times


def database_setting(url: str) -> str:
    """`SHOW synchronous_commit` on a new connection to the ledger's database as its role: what
    the ledger's own connections start with (the API cannot show their sessions)."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW synchronous_commit").fetchone()
    return str(row[0]) if row else "?"
