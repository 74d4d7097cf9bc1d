"""The crash matrix for LangGraph (langgraph 1.2.24, langchain 1.5.2): payments by an agent
guarded as docs/frameworks/langgraph.md shows, under LangGraph's default durability, with a
model that re-issues its call under a new id when asked again, SIGKILLed at random before the
charge is sent, while it is in flight and after the provider answered, and restarted with
LangGraph's own resume until every thread has ended (`agents/langgraph_crashes.py`). The
ledger's sweep and lookups run beside it (`LedgerWorker`), as `make run`'s worker would.

After the last restart, for every payment (`crashes.py`): at most one charge at the provider; a
charge unless the ledger ended the effect `failed` with proof that nothing was sent; and a
conversation that agrees with the ledger (the model told "done" with the charge's id exactly
when the provider holds it). 24 payments in two corners of the matrix here; `make
crashtest-frameworks` runs 200 in all four (`--crash-matrix=full --crash-payments=200`) and
prints the table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from tests.adapters import crashes
from tests.adapters.agents import langgraph_crashes as agent

SCRIPT = Path(agent.__file__)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    crashes.parametrize(metafunc)


@pytest.fixture
def size(request: pytest.FixtureRequest) -> tuple[int, str, str]:
    return crashes.size(request.config)


def unfinished(checkpoints: Path, payments: int) -> list[int]:
    with SqliteSaver.from_conn_string(str(checkpoints)) as saver:
        return [
            i
            for i in range(payments)
            if not agent.ended(agent.graph(saver, i).get_state(agent.config(i)))
        ]


def told(checkpoints: Path, payments: int) -> crashes.Told:
    """The last thing each thread's model was told about its charge: the tool message's text,
    and whether it was a result rather than an error."""
    with SqliteSaver.from_conn_string(str(checkpoints)) as saver:
        states = {i: agent.graph(saver, i).get_state(agent.config(i)) for i in range(payments)}
    last = {
        i: [m for m in state.values["messages"] if isinstance(m, ToolMessage)][-1]
        for i, state in states.items()
    }
    return {i: (str(message.content), message.status != "error") for i, message in last.items()}


def test_sigkills_under_langgraphs_defaults_charge_each_payment_once(
    stage, ledger_worker, tmp_path, mode, latency_ms, size
):
    payments, kill_p, identity = size
    crashes.set_corner(stage, tmp_path, mode, latency_ms)
    checkpoints = tmp_path / "checkpoints.sqlite"
    env = {"LG_KILL_P": kill_p, "LG_IDENTITY": identity, "LG_CONCURRENCY": "4"}

    kills = crashes.run_until_done(
        stage,
        SCRIPT,
        [str(checkpoints), "0", str(payments)],
        env,
        lambda: unfinished(checkpoints, payments),
    )
    counts = crashes.verdict(stage, payments, told(checkpoints, payments))

    print(crashes.report("langgraph", size, (mode, latency_ms), kills, counts))
    assert sum(kills.values()) > 0  # the crashes happened
    crashes.assert_no_loss_and_no_repeat(counts, payments)


def test_sigkills_with_a_provider_known_by_its_statements_alone_charge_each_payment_once(
    stage, ledger_worker, tmp_path, request
):
    """The statement corner (`crashes.statement_corner`), the guard waiting out what is in
    doubt (`LG_WAIT=1`, `wait=True`)."""
    size = crashes.size(request.config, crashes.STATEMENT_PAYMENTS)
    payments, kill_p, identity = size
    crashes.set_corner(stage, tmp_path, *crashes.STATEMENT)
    checkpoints = tmp_path / "checkpoints.sqlite"
    env = {"LG_KILL_P": kill_p, "LG_IDENTITY": identity, "LG_CONCURRENCY": "4", "LG_WAIT": "1"}
    crashes.statement_corner(
        stage,
        "langgraph",
        size,
        lambda: crashes.run_until_done(
            stage,
            SCRIPT,
            [str(checkpoints), "0", str(payments)],
            env,
            lambda: unfinished(checkpoints, payments),
        ),
        lambda: told(checkpoints, payments),
    )
