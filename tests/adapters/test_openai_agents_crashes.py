"""The crash matrix for the OpenAI Agents SDK (openai-agents 0.24.0): payments by an agent guarded
as docs/frameworks/openai-agents.md shows, each conversation in the SDK's own `SQLiteSession`,
with a model that re-issues its call under a new id when asked again, SIGKILLed at random before
the charge is sent, while it is in flight and after the provider answered, and restarted, each
conversation resumed from its session with no new input, until every conversation has ended
(`agents/openai_agents_crashes.py`). The ledger's sweep and lookups run beside it
(`LedgerWorker`), as `make run`'s worker would.

The verdict is the other matrices' (`crashes.py`): at most one charge per payment, a charge
unless the ledger ended the effect `failed` with proof that nothing was sent, and a conversation
that agrees with the ledger. The suite's two corners at 20 payments here (each kill costs a new
agent process, and importing the SDK takes about 2 s of CPU); `make crashtest-frameworks` runs
all four at 200.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.adapters import crashes
from tests.adapters.agents import openai_agents_crashes as agent

SCRIPT = Path(agent.__file__)
SUITE_PAYMENTS = 20


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    crashes.parametrize(metafunc)


@pytest.fixture
def size(request: pytest.FixtureRequest) -> tuple[int, str, str]:
    return crashes.size(request.config, SUITE_PAYMENTS)


def conversations(sessions: Path, payments: int) -> list[list[object]]:
    """Each conversation's items, as its session holds them."""

    async def read() -> list[list[object]]:
        found = []
        for i in range(payments):
            kept = agent.session(sessions, i)
            found.append(await kept.get_items())
            kept.close()
        return found

    return asyncio.run(read())


def unfinished(sessions: Path, payments: int) -> list[int]:
    held = conversations(sessions, payments)
    return [i for i, items in enumerate(held) if not agent.ended(items)]


def told(sessions: Path, payments: int) -> crashes.Told:
    """The last tool output each conversation's model was given: its text, and whether it was
    the charge rather than a refusal."""
    last = [agent.outputs(items)[-1] for items in conversations(sessions, payments)]
    return {i: (text, agent.is_result(text)) for i, text in enumerate(last)}


def test_sigkills_with_the_sdks_session_charge_each_payment_once(
    stage, ledger_worker, tmp_path, mode, latency_ms, size
):
    payments, kill_p, identity = size
    crashes.set_corner(stage, tmp_path, mode, latency_ms)
    sessions = tmp_path / "sessions"
    env = {"OA_KILL_P": kill_p, "OA_IDENTITY": identity, "OA_CONCURRENCY": "4"}

    kills = crashes.run_until_done(
        stage,
        SCRIPT,
        [str(sessions), "0", str(payments)],
        env,
        lambda: unfinished(sessions, payments),
    )
    counts = crashes.verdict(stage, payments, told(sessions, payments))

    print(crashes.report("openai_agents", size, (mode, latency_ms), kills, counts))
    assert sum(kills.values()) > 0  # the crashes happened
    crashes.assert_no_loss_and_no_repeat(counts, payments)
