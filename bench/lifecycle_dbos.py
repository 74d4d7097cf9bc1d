"""Baseline C: DBOS step checkpoints, in child processes of their own (`lifecycle.py
--dbos-worker`), one DBOS executor per core sharing one system database."""

from __future__ import annotations

import json
import secrets
import signal
import sys
import uuid
from dataclasses import asdict
from typing import Any

from bench.harness import ROOT, LineChild, bench_database, drop_quietly
from bench.lifecycle_clients import LifecycleError
from bench.lifecycle_load import (
    OWN_DATABASES,
    ClientReport,
    Measurement,
    Options,
    ProcessReport,
    Result,
    Window,
    _sample_window,
    run_process,
)
from devstack.provision import recreate_database

DBOS_GOAL = 1.0  # ledger lifecycles/s ÷ DBOS steps/s
SCRIPT = ROOT / "bench" / "lifecycle.py"  # the child runs it with --dbos-worker


class DbosUnavailable(Exception):
    pass


class DbosWorker(LineChild):
    """One `--dbos-worker` child process: DBOS launched once, one round per `ROUND` line."""

    def __init__(self, url: str, executor: str, clients: int, opts: Options) -> None:
        cmd = [
            sys.executable,
            str(SCRIPT),
            "--dbos-worker",
            url,
            "--dbos-executor",
            executor,
            "--clients",
            str(clients),
        ]
        super().__init__(cmd, DbosUnavailable)


class DbosContender:
    """DBOS workflows of 2 steps in one process per core (each a DBOS executor of its own,
    sharing one system database), the clients spread over them like baseline B's.

    The processes live for the whole benchmark, so DBOS launches once and its rounds
    interleave with the other contenders'. Between rounds they are idle.
    """

    def __init__(self, base_url: str, opts: Options, processes: int) -> None:
        try:
            import dbos  # noqa: F401
        except ImportError as exc:
            raise DbosUnavailable(f"dbos does not import ({exc})") from None
        self.version = _dist_version("dbos")
        self.processes = processes
        self.name = f"C: DBOS {self.version}, {opts.clients} workflows × 2 steps"
        self.opts = opts
        self.base_url = base_url
        self.db_name = bench_database(base_url, "dbos")
        url = recreate_database(base_url, self.db_name)
        OWN_DATABASES.add(self.db_name)
        self.workers: list[DbosWorker] = []
        # The first worker creates DBOS's schema alone; the others start once it is ready.
        spread = [len(range(i, opts.clients, processes)) for i in range(processes)]
        self.workers.append(DbosWorker(url, "bench-0", spread[0], opts))
        self._pending = [(url, f"bench-{i}", n) for i, n in enumerate(spread) if i]

    def wait_ready(self) -> None:
        self.workers[0].line("BENCH-READY", timeout=120)
        for url, executor, clients in self._pending:
            self.workers.append(DbosWorker(url, executor, clients, self.opts))
        for worker in self.workers[1:]:
            worker.line("BENCH-READY", timeout=120)

    def measure(self) -> Measurement:
        window = Window.after(0.3, self.opts)
        for worker in self.workers:
            worker.send(f"ROUND {window.start} {window.measure} {window.end}")
        cpu = _sample_window(
            window.measure,
            window.end,
            load_pids={w.proc.pid for w in self.workers},
            server_pgid=None,
        )
        reports = []
        for worker in self.workers:
            raw = json.loads(worker.line("BENCH-RESULT ", timeout=120))
            reports.append(
                ProcessReport([ClientReport(**c) for c in raw["clients"]], raw["cpu_seconds"])
            )
        return Measurement(reports, self.opts.duration, cpu)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        if not self.opts.keep_db:
            drop_quietly(self.base_url, self.db_name)


def dbos_worker(system_db_url: str, executor: str, clients: int) -> int:
    """Child process: on each `ROUND start measure end` line, `clients` concurrent DBOS
    workflows of 2 steps each, back to back; reports like the other contenders."""
    from dbos import DBOS, DBOSConfig

    config: DBOSConfig = {
        "name": "effect-ledger-bench",
        "system_database_url": system_db_url,
        "executor_id": executor,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    def record_intent(run_id: str, step: int) -> dict[str, Any]:
        return {
            "effect_key": f"{run_id}:step-{step}",
            "status": "dispatching",
            "lease_token": secrets.token_urlsafe(24),
            "request": {"amount": "49.95", "currency": "EUR", "card": "[card:redacted]"},
        }

    @DBOS.step()
    def record_outcome(intent: dict[str, Any]) -> dict[str, Any]:
        ref = f"ch_{secrets.token_hex(8)}"
        return {"status": "confirmed", "provider_ref": ref, "response": {"id": ref}}

    @DBOS.workflow()
    def lifecycle(run_id: str, step: int) -> dict[str, Any]:
        return record_outcome(record_intent(run_id, step))

    class WorkflowSession:
        def __init__(self, client: int) -> None:
            self.run_id = f"dbos-{executor}-{client}-{uuid.uuid4().hex[:8]}"

        def lifecycle(self, step: int) -> None:
            if lifecycle(self.run_id, step).get("status") != "confirmed":
                raise LifecycleError("workflow did not return its outcome")

        def close(self) -> None:
            pass

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    DBOS.launch()
    try:
        print("BENCH-READY", flush=True)
        for command in sys.stdin:
            word, *times = command.split()
            if word != "ROUND":
                break
            window = Window(*(float(t) for t in times))
            report = run_process(WorkflowSession, list(range(clients)), window)
            print("BENCH-RESULT " + json.dumps(asdict(report)), flush=True)
    finally:
        DBOS.destroy()
    return 0


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def skipped(reason: str) -> Result:
    print(f"DBOS baseline skipped: {reason}", flush=True)
    return Result(
        name="C: DBOS step checkpoints",
        unit="steps",
        rate=None,
        p50_ms=None,
        p99_ms=None,
        completed=0,
        errors=0,
        error_samples=[],
        goal=DBOS_GOAL,
        note=f"skipped: {reason}",
    )
