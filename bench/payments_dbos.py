"""The DBOS contender of the payment-loop benchmark: one DBOS workflow per payment, the provider
call its one step, in a process of its own (`payments.py --dbos-worker`).

The workflow's id is the payment's name and the step sends it as the `Idempotency-Key`, which
is how a DBOS application makes a provider call safe to repeat. DBOS checkpoints the workflow's
start (with its input), the step's output and the workflow's end in its system database,
`<DATABASE_URL's database>_payments_dbos`, created afresh on the same PostgreSQL. Launched the
way `bench/lifecycle_dbos.py` launches it (a config naming that database and an executor id).

DBOS runs in a child process because it starts background threads (notification listener,
queue poller) that would otherwise share the GIL with the other contenders' loops; the parent
sends `ROUND warmup payments tag` lines and reads `PAYBENCH-RESULT {json}` back. Every
connection DBOS's SQLAlchemy engines open is asked `SHOW synchronous_commit` as it opens.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from bench.harness import ROOT, LineChild, bench_database, drop_quietly
from bench.lifecycle_load import OWN_DATABASES
from bench.payments_loops import PROVIDER, PaymentError, ProviderClient, Round, run_round
from bench.payments_loops import charge_request as make_request
from devstack.provision import recreate_database

SCRIPT = ROOT / "bench" / "payments.py"
READY, RESULT = "PAYBENCH-READY ", "PAYBENCH-RESULT "


class DbosFailed(Exception):
    """DBOS is not installed, would not launch, or its worker died."""


def dbos_version() -> str:
    try:
        return version("dbos")
    except PackageNotFoundError:
        return "?"


class DbosLoop:
    """The parent's handle on the DBOS worker process."""

    def __init__(self, base_url: str, provider_url: str, keep_db: bool) -> None:
        try:
            import dbos  # noqa: F401
        except ImportError as exc:
            raise DbosFailed(f"dbos does not import ({exc}); pip install -e '.[bench]'") from None
        self.name = f"DBOS {dbos_version()}"
        self.base_url, self.keep_db = base_url, keep_db
        self.db_name = bench_database(base_url, "payments_dbos")
        OWN_DATABASES.add(self.db_name)
        url = recreate_database(base_url, self.db_name)
        self.child = LineChild(
            [sys.executable, str(SCRIPT), "--dbos-worker", url, "--provider", provider_url],
            DbosFailed,
        )
        self.synchronous_commit: list[str] = []

    @property
    def pid(self) -> int:
        return self.child.proc.pid

    def wait_ready(self, timeout: float = 120.0) -> None:
        self.synchronous_commit = json.loads(self.child.line(READY, timeout))["synchronous_commit"]

    def measure(self, warmup: int, payments: int, tag: str) -> Round:
        self.child.send(f"ROUND {warmup} {payments} {tag}")
        result = Round(**json.loads(self.child.line(RESULT, timeout=600)))
        self.synchronous_commit = sorted({*self.synchronous_commit, *result.synchronous_commit})
        return result

    def close(self) -> None:
        self.child.close()
        if not self.keep_db:
            drop_quietly(self.base_url, self.db_name)


# --- The worker process --------------------------------------------------------------------------


def _watch_synchronous_commit(seen: set[str]) -> None:
    """Ask every new connection of every SQLAlchemy engine (DBOS's) for its setting."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def on_connect(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SHOW synchronous_commit")
            seen.add(str(cursor.fetchone()[0]))
        finally:
            cursor.close()
        if not getattr(dbapi_connection, "autocommit", False):
            dbapi_connection.rollback()  # hand the connection over as it came

    event.listen(Engine, "connect", on_connect)


def dbos_worker(system_db_url: str, provider_url: str) -> int:
    """Child process: DBOS launched once; on each `ROUND warmup payments tag` line a round of
    payments, one workflow each, reported as one JSON line."""
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    seen: set[str] = set()
    _watch_synchronous_commit(seen)
    config: DBOSConfig = {
        "name": "effect-ledger-payments-bench",
        "system_database_url": system_db_url,
        "executor_id": "payments-bench",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    provider = ProviderClient(provider_url)
    provider_ms: list[float] = []

    @DBOS.step()
    def charge(key: str, request: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        result = provider.charge(key, request)
        provider_ms.append(1000 * (time.perf_counter() - start))
        return result

    @DBOS.workflow()
    def payment(request: dict[str, Any]) -> dict[str, Any]:
        return charge(DBOS.workflow_id or "", request)

    def one_round(warmup: int, payments: int, tag: str) -> Round:
        def pay(number: int) -> dict[str, float]:
            key = f"{tag}:pay-{number}"
            provider_ms.clear()
            with SetWorkflowID(key):
                charged = payment(make_request(key))
            if charged.get("status") != "succeeded" or not provider_ms:
                raise PaymentError(f"workflow {key} returned {charged!r:.200}")
            return {PROVIDER: provider_ms[-1]}

        result = run_round("DBOS", pay, warmup, payments)
        result.synchronous_commit = sorted(seen)
        return result

    DBOS.launch()
    try:
        print(READY + json.dumps({"synchronous_commit": sorted(seen)}), flush=True)
        for command in sys.stdin:
            word, *args = command.split()
            if word != "ROUND":
                break
            result = one_round(int(args[0]), int(args[1]), args[2])
            print(RESULT + json.dumps(asdict(result)), flush=True)
    finally:
        provider.close()
        DBOS.destroy()
    return 0
