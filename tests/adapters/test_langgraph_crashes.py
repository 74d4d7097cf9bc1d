"""The crash matrix for LangGraph (langgraph 1.2.24, langchain 1.5.2): payments by an agent
guarded as docs/frameworks/langgraph.md shows, under LangGraph's default durability, with a
model that re-issues its call under a new id when asked again, SIGKILLed at random before the
charge is sent, while it is in flight and after the provider answered, and restarted with
LangGraph's own resume until every thread has ended (`agents/langgraph_crashes.py`). The
ledger's sweep and lookups run beside it (`LedgerWorker`), as `make run`'s worker would.

After the last restart, for every payment: at most one charge at the provider; a charge unless
the ledger ended the effect `failed` with proof that nothing was sent; and a conversation that
agrees with the ledger (the model told "done" with the charge's id exactly when the provider
holds it). 50 payments in two corners of the matrix here; `make crashtest-frameworks` runs 200
in all four (`--crash-matrix=full --crash-payments=200`) and prints the table.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from devstack.harness import charge_tool_file
from ledger.models import Effect, Tool
from ledger.policy.toolfile import load
from tests.adapters.agents import langgraph_crashes as agent

SCRIPT = Path(agent.__file__)
# (provider mode, provider latency in ms): `keys` honours idempotency keys; `lookup-only`
# keeps them as a searchable reference only, so a lookup's late not-found proves absence.
FULL = [("keys", 0), ("keys", 50), ("lookup-only", 0), ("lookup-only", 50)]
# The suite runs two opposite corners (each latency and each mode once, about 75 s each, to keep
# `make test` short); `make crashtest-frameworks` runs the four (`--crash-matrix=full`).
SUITE = [("keys", 50), ("lookup-only", 0)]
ROUNDS = 400


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "mode" in metafunc.fixturenames:
        full = metafunc.config.getoption("crash_matrix") == "full"
        metafunc.parametrize(("mode", "latency_ms"), FULL if full else SUITE)


@pytest.fixture
def size(request: pytest.FixtureRequest) -> tuple[int, str, str]:
    """(payments, SIGKILL probability at each place, identity: `position`, or the control's
    `call_id`)."""
    option = request.config.getoption
    return option("crash_payments"), option("crash_kill_p"), option("crash_identity")


def run_until_done(
    stage: Any, checkpoints: Path, payments: int, kill_p: str, identity: str
) -> Counter[str]:
    """Run the agent, restarting it after each SIGKILL, until every thread has ended."""
    kills: Counter[str] = Counter()
    for _ in range(ROUNDS):
        done = stage.run_python(
            SCRIPT,
            str(checkpoints),
            "0",
            str(payments),
            timeout=900,
            LG_KILL_P=kill_p,
            LG_IDENTITY=identity,
            LG_CONCURRENCY="4",
            EFFECT_LEDGER_LEASE_SECONDS="2",
        )
        kills.update(line.split()[1] for line in done.stdout.splitlines() if line[:5] == "KILL ")
        if done.returncode == 0 and len(unfinished(checkpoints, payments)) == 0:
            return kills
        assert done.returncode in (0, -signal.SIGKILL), done.stderr[-3000:]
    left = unfinished(checkpoints, payments)
    raise AssertionError(f"threads still running after {ROUNDS} rounds: {left}")


def unfinished(checkpoints: Path, payments: int) -> list[int]:
    with SqliteSaver.from_conn_string(str(checkpoints)) as saver:
        return [
            i
            for i in range(payments)
            if not agent.ended(agent.graph(saver, i).get_state(agent.config(i)))
        ]


def told(checkpoints: Path, payments: int) -> dict[int, ToolMessage]:
    """The last thing each thread's model was told about its charge."""
    with SqliteSaver.from_conn_string(str(checkpoints)) as saver:
        states = {i: agent.graph(saver, i).get_state(agent.config(i)) for i in range(payments)}
    return {
        i: [m for m in state.values["messages"] if isinstance(m, ToolMessage)][-1]
        for i, state in states.items()
    }


def verdict(stage: Any, checkpoints: Path, payments: int) -> Counter[str]:
    """Per payment: charges at the provider, the ledger's effects, what the model was told."""
    charges: dict[str, list[dict[str, Any]]] = {}
    for charge in stage.charges():
        charges.setdefault(charge["account"], []).append(charge)
    messages = told(checkpoints, payments)
    counts: Counter[str] = Counter()
    for i in range(payments):
        made = charges.get(f"acct_{i}", [])
        effects = list(Effect.objects.filter(agent=stage.agent, run_id=f"pay-{i}"))
        statuses = sorted(e.status for e in effects)
        failed_unsent = statuses == ["failed"] and not made
        message = messages[i]
        counts["effects"] += len(effects)
        counts["double charges"] += len(made) > 1
        counts["uncharged"] += not made and not failed_unsent
        said_done = message.status != "error" and any(c["id"] in message.content for c in made)
        if said_done != (len(made) == 1 and statuses == ["confirmed"]):
            counts["contradictions"] += 1
            counts[f"told: {message.content[:60]} / ledger: {statuses}"] += 1
    return counts


def assert_no_loss_and_no_repeat(counts: Counter[str], payments: int) -> None:
    assert counts["double charges"] == 0, counts
    assert counts["uncharged"] == 0, counts
    assert counts["contradictions"] == 0, counts
    assert counts["effects"] == payments, counts  # one effect per payment, re-issued or not


def test_sigkills_under_langgraphs_defaults_charge_each_payment_once(
    stage, ledger_worker, tmp_path, mode, latency_ms, size
):
    payments, kill_p, identity = size
    load(charge_tool_file(tmp_path, stage.payments.url, mode))
    # A not-found proves absence one second after the call (a crash leaves no doubt for long).
    Tool.objects.filter(name="charge_card").update(settle_after=timedelta(seconds=1))
    faults = {"reference_only": mode == "lookup-only", "latency": latency_ms}
    stage.payments.set_faults(**{k: v for k, v in faults.items() if v})
    checkpoints = tmp_path / "checkpoints.sqlite"

    kills = run_until_done(stage, checkpoints, payments, kill_p, identity)
    counts = verdict(stage, checkpoints, payments)

    print(
        f"CRASH-MATRIX langgraph ({identity}) {mode:<11} {latency_ms:>3} ms  payments {payments}  "
        f"kills {sum(kills.values())} {json.dumps(dict(sorted(kills.items())))}  effects "
        f"{counts['effects']}  double charges {counts['double charges']}  uncharged "
        f"{counts['uncharged']}  contradictions {counts['contradictions']}"
    )
    assert sum(kills.values()) > 0  # the crashes happened
    assert_no_loss_and_no_repeat(counts, payments)
