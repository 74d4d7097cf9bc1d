"""The crash matrix for DBOS (dbos 3.4): payments, a workflow each, whose charge is a
`ledger_step` (`agents/dbos_crashes.py`), SIGKILLed at random before the charge is sent, while
it is in flight and after the provider answered, and started again until every workflow has
ended: each start launches DBOS, whose own recovery runs the workflows the dead process left
pending from its PostgreSQL system database (created afresh for each corner), the step that
was running again under the same step id. The ledger's sweep and lookups run beside it
(`LedgerWorker`).

The step is named by the workflow id and DBOS's step id, both kept in the system database, so
the re-run step meets its effect and waits (the adapter's `wait=True`) for the ledger to settle
it. The verdict is the other frameworks' (`crashes.py`), a workflow's answer standing for what
the model was told: the charge, or the refusal it caught. The suite runs two corners at 14
payments and the statement corner at 12; `make crashtest-frameworks` all five at size. With
`--crash-identity=call_id` the step is named by an id drawn afresh at each run, the control:
the matrix finds its extra charges.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from dbos import DBOSClient

from devstack.provision import database_url, drop_database
from tests.adapters import crashes
from tests.adapters.agents import dbos_crashes as agent

SCRIPT = Path(agent.__file__)
SUITE_PAYMENTS = 14  # no SIGKILL at all in a corner: 0.61 ** 14, about 1 in 1,000
ENDED = ("SUCCESS", "ERROR")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    crashes.parametrize(metafunc)


@pytest.fixture
def size(request: pytest.FixtureRequest) -> tuple[int, str, str]:
    return crashes.size(request.config, SUITE_PAYMENTS)


@pytest.fixture
def system_db() -> Iterator[str]:
    """DBOS's system database, empty (DBOS creates its tables on launch), one per corner."""
    base = os.environ["DATABASE_URL"]
    name = f"{urlsplit(base).path.lstrip('/')}_sys_crashes"
    drop_database(base, name)
    yield database_url(base, name)
    drop_database(base, name)


class Workflows:
    """The corner's workflows as DBOS's system database has them (read with `DBOSClient`,
    once the first process has launched DBOS, which creates its tables)."""

    def __init__(self, system_db: str) -> None:
        self.system_db = system_db
        self._client: DBOSClient | None = None

    @property
    def client(self) -> DBOSClient:
        if self._client is None:
            self._client = DBOSClient(system_database_url=self.system_db)
        return self._client

    def unfinished(self, payments: int) -> list[int]:
        found = self.client.list_workflows(workflow_ids=[f"pay-{i}" for i in range(payments)])
        ended = {w.workflow_id for w in found if w.status in ENDED}
        return [i for i in range(payments) if f"pay-{i}" not in ended]

    def told(self, payments: int) -> crashes.Told:
        """Each workflow's answer: the charge it got, or the refusal it caught."""
        answers = {
            i: self.client.retrieve_workflow(f"pay-{i}").get_result() for i in range(payments)
        }
        return {i: (answer["told"], answer["ok"]) for i, answer in answers.items()}

    def close(self) -> None:
        if self._client is not None:
            self._client.destroy()


@pytest.fixture
def workflows(system_db: str) -> Iterator[Workflows]:
    found = Workflows(system_db)
    yield found
    found.close()


def test_sigkills_recovered_by_dbos_charge_each_payment_once(
    stage, ledger_worker, system_db, workflows, tmp_path, mode, latency_ms, size
):
    payments, kill_p, identity = size
    crashes.set_corner(stage, tmp_path, mode, latency_ms)
    env = {
        "DBOS_KILL_P": kill_p,
        "DBOS_IDENTITY": identity,
        "DBOS_SYSTEM_DATABASE_URL": system_db,
        "DBOS_TEST_RUN": f"crashes-{uuid.uuid4().hex[:12]}",
    }

    kills = crashes.run_until_done(
        stage,
        SCRIPT,
        ["0", str(payments)],
        env,
        lambda: workflows.unfinished(payments),
    )
    counts = crashes.verdict(stage, payments, workflows.told(payments))

    named = (payments, kill_p, "step_id" if identity == "position" else identity)
    print(crashes.report("dbos", named, (mode, latency_ms), kills, counts))
    assert sum(kills.values()) > 0  # the crashes happened
    crashes.assert_no_loss_and_no_repeat(counts, payments)


def test_sigkills_with_a_provider_known_by_its_statements_alone_charge_each_payment_once(
    stage, ledger_worker, system_db, workflows, tmp_path, request
):
    """The statement corner (`crashes.statement_corner`): the step waits on the ledger as it
    always does (`ledger_step` is `wait=True`)."""
    payments, kill_p, identity = crashes.size(request.config, crashes.STATEMENT_PAYMENTS)
    crashes.set_corner(stage, tmp_path, *crashes.STATEMENT)
    env = {
        "DBOS_KILL_P": kill_p,
        "DBOS_IDENTITY": identity,
        "DBOS_SYSTEM_DATABASE_URL": system_db,
        "DBOS_TEST_RUN": f"crashes-{uuid.uuid4().hex[:12]}",
    }
    named = (payments, kill_p, "step_id" if identity == "position" else identity)
    crashes.statement_corner(
        stage,
        "dbos",
        named,
        lambda: crashes.run_until_done(
            stage, SCRIPT, ["0", str(payments)], env, lambda: workflows.unfinished(payments)
        ),
        lambda: workflows.told(payments),
    )
