"""The crash matrix for Pydantic AI (pydantic-ai-slim 2.78.0): payments by an agent guarded as
docs/frameworks/pydantic-ai.md shows, its message history saved after each node to a store whose
writes land 20 ms later (so a crash can lose the model's latest response), with a model that
re-issues its call under a new id when asked again, SIGKILLed at random before the charge is
sent, while it is in flight and after the provider answered, and restarted, each conversation
resumed from its saved history with no new prompt, until every conversation has ended
(`agents/pydantic_ai_crashes.py`). The ledger's sweep and lookups run beside it
(`LedgerWorker`), as `make run`'s worker would.

The verdict is the LangGraph matrix's (`crashes.py`): at most one charge per payment, a charge
unless the ledger ended the effect `failed` with proof that nothing was sent, and a conversation
that agrees with the ledger. The suite's two corners at 24 payments here, and the statement
corner at 12; `make crashtest-frameworks` runs all five at 200.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters import crashes
from tests.adapters.agents import pydantic_ai_crashes as agent

SCRIPT = Path(agent.__file__)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    crashes.parametrize(metafunc)


@pytest.fixture
def size(request: pytest.FixtureRequest) -> tuple[int, str, str]:
    return crashes.size(request.config)


def unfinished(histories: Path, payments: int) -> list[int]:
    store = agent.DistantStore(histories)
    return [i for i in range(payments) if not agent.ended(store.load(i))]


def told(histories: Path, payments: int) -> crashes.Told:
    """The last tool result each conversation's model was given: its text, and whether it was a
    result rather than a failure."""
    store = agent.DistantStore(histories)
    last = {i: agent.returns(store.load(i) or [])[-1] for i in range(payments)}
    return {i: (str(part.content), part.outcome == "success") for i, part in last.items()}


def test_sigkills_with_the_history_saved_after_each_node_charge_each_payment_once(
    stage, ledger_worker, tmp_path, mode, latency_ms, size
):
    payments, kill_p, identity = size
    crashes.set_corner(stage, tmp_path, mode, latency_ms)
    histories = tmp_path / "histories"
    env = {"PA_KILL_P": kill_p, "PA_IDENTITY": identity, "PA_CONCURRENCY": "4"}

    kills = crashes.run_until_done(
        stage,
        SCRIPT,
        [str(histories), "0", str(payments)],
        env,
        lambda: unfinished(histories, payments),
    )
    counts = crashes.verdict(stage, payments, told(histories, payments))

    print(crashes.report("pydantic_ai", size, (mode, latency_ms), kills, counts))
    assert sum(kills.values()) > 0  # the crashes happened
    crashes.assert_no_loss_and_no_repeat(counts, payments)


def test_sigkills_with_a_provider_known_by_its_statements_alone_charge_each_payment_once(
    stage, ledger_worker, tmp_path, request
):
    """The statement corner (`crashes.statement_corner`), the guard waiting out what is in
    doubt (`PA_WAIT=1`, `wait=True`)."""
    size = crashes.size(request.config, crashes.STATEMENT_PAYMENTS)
    payments, kill_p, identity = size
    crashes.set_corner(stage, tmp_path, *crashes.STATEMENT)
    histories = tmp_path / "histories"
    env = {"PA_KILL_P": kill_p, "PA_IDENTITY": identity, "PA_CONCURRENCY": "4", "PA_WAIT": "1"}
    crashes.statement_corner(
        stage,
        "pydantic_ai",
        size,
        lambda: crashes.run_until_done(
            stage,
            SCRIPT,
            [str(histories), "0", str(payments)],
            env,
            lambda: unfinished(histories, payments),
        ),
        lambda: told(histories, payments),
    )
