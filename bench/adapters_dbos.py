"""The DBOS agent of the adapter benchmark: one DBOS workflow per run, its one step the charge,
as `ledger_step` (guarded) or `@DBOS.step()` (unguarded), in a process of its own.

DBOS starts background threads (notification listener, queue poller) that would share the GIL
with the other frameworks' agents, so it runs in a child (`adapters.py --dbos-worker`), launched
once; the parent sends `ROUND <1|0> warmup calls tag` lines and reads `ADBENCH-RESULT {json}`
back. Each run is a workflow under a workflow id of its own (`SetWorkflowID`), which is the
effect's run; the step id is its call. The unguarded step sends the workflow id as the
`Idempotency-Key`, which is how a DBOS application makes a provider call safe to repeat. DBOS's
system database is `<DATABASE_URL's database>_adapters_dbos`, created afresh on the same
PostgreSQL and dropped at the end unless --keep-db.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import asdict
from typing import Any

from bench.adapters_agents import ARGS, Provider, Sample, effect_key, timed_runs
from bench.harness import ROOT, LineChild, bench_database, drop_quietly
from devstack.provision import recreate_database

SCRIPT = ROOT / "bench" / "adapters.py"
READY, RESULT = "ADBENCH-READY", "ADBENCH-RESULT "


class DbosFailed(Exception):
    """DBOS would not launch, or its worker died."""


class DbosAgent:
    """The parent's handle on the DBOS worker. The worker finds the ledger in the environment
    (`EFFECT_LEDGER_URL`, `EFFECT_LEDGER_API_KEY`), which the parent sets before this starts."""

    name = "DBOS"

    def __init__(self, base_url: str, provider_url: str, keep_db: bool) -> None:
        self.base_url, self.keep_db = base_url, keep_db
        self.db_name = bench_database(base_url, "adapters_dbos")
        url = recreate_database(base_url, self.db_name)
        self.child = LineChild(
            [sys.executable, str(SCRIPT), "--dbos-worker", url, "--provider", provider_url],
            DbosFailed,
        )
        self.child.line(READY, timeout=120)

    @property
    def pid(self) -> int:
        return self.child.proc.pid

    def measure(self, guarded: bool, warmup: int, calls: int, tag: str) -> Sample:
        self.child.send(f"ROUND {int(guarded)} {warmup} {calls} {tag}")
        return Sample(**json.loads(self.child.line(RESULT, timeout=900)))

    def close(self) -> None:
        self.child.close()
        if not self.keep_db:
            drop_quietly(self.base_url, self.db_name)


def dbos_worker(system_db_url: str, provider_url: str) -> int:
    """Child process: DBOS launched once; a measurement per `ROUND` line, until stdin closes."""
    from dbos import DBOS, DBOSConfig, SetWorkflowID
    from ledger_client.adapters.dbos import ledger_step

    provider = Provider(provider_url)
    executor = f"adapters-bench-{uuid.uuid4().hex[:8]}"
    config: DBOSConfig = {
        "name": "adapters-bench",
        "system_database_url": system_db_url,
        "executor_id": executor,
        "application_version": executor,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @ledger_step(tool="charge_card", target="{account}")
    def guarded_charge(amount: str, currency: str, account: str) -> dict[str, Any]:
        return provider.charge(effect_key(), amount, currency, account)

    @DBOS.step()
    def plain_charge(amount: str, currency: str, account: str) -> dict[str, Any]:
        return provider.charge(DBOS.workflow_id or "", amount, currency, account)

    @DBOS.workflow()
    def guarded_pay() -> dict[str, Any]:
        return guarded_charge(**ARGS)

    @DBOS.workflow()
    def plain_pay() -> dict[str, Any]:
        return plain_charge(**ARGS)

    def measure(guarded: bool, warmup: int, calls: int, tag: str) -> Sample:
        workflow = guarded_pay if guarded else plain_pay

        def one(run_id: str) -> Any:
            with SetWorkflowID(run_id):
                return workflow()

        return timed_runs(one, warmup, calls, tag)

    DBOS.launch()
    try:
        print(READY, flush=True)
        for line in sys.stdin:
            word, guarded, warmup, calls, tag = line.split()
            if word != "ROUND":
                continue
            sample = measure(guarded == "1", int(warmup), int(calls), tag)
            print(RESULT + json.dumps(asdict(sample)), flush=True)
    finally:
        DBOS.destroy()
        provider.close()
    return 0


def ledger_environment(base_url: str, api_key: str) -> None:
    """Where the DBOS worker (a child of this process) finds the ledger."""
    os.environ["EFFECT_LEDGER_URL"] = base_url
    os.environ["EFFECT_LEDGER_API_KEY"] = api_key
    os.environ["EFFECT_LEDGER_OWNER"] = "adapters-bench-dbos"
