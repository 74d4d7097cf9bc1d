"""What the frameworks' crash matrices share (tests/adapters/test_*_crashes.py, `make
crashtest-frameworks`): the corners, the sizes from the command line, the stage set up for a
corner, the agent restarted after each SIGKILL until every conversation has ended, and the
verdict per payment.

The verdict, after the last restart, for every payment `pay-<i>` (account `acct_<i>`): at most
one charge at the provider; a charge unless the ledger ended the effect `failed` with proof that
nothing was sent; and a conversation that agrees with the ledger (the model told "done" with
the charge's id exactly when the provider holds it).
"""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection
from django.db.models import Count

from devstack.harness import charge_tool_file
from ledger.models import Effect, EffectEvent, Tool
from ledger.models.states import Status
from ledger.policy.toolfile import load
from ledger.statements import held, import_statement
from tests.adapters.forkserver import ForkServer

# (provider mode, provider latency in ms): `keys` honours idempotency keys; `lookup-only`
# keeps them as a searchable reference only, so a lookup's late not-found proves absence;
# `statement` (a corner of its own, `STATEMENT`) neither: only its statements say what it did.
FULL = [("keys", 0), ("keys", 50), ("lookup-only", 0), ("lookup-only", 50)]
# The suite runs two opposite corners (each latency and each mode once, to keep `make test`
# short); `make crashtest-frameworks` runs the four (`--crash-matrix=full`).
SUITE = [("keys", 50), ("lookup-only", 0)]
# Payments per corner in the suite: no SIGKILL at all in a corner is 0.61 ** 24, about 1 in
# 140,000; `make crashtest-frameworks` runs 200.
SUITE_PAYMENTS = 24
STATEMENT = ("statement", 0)
ROUNDS = 400

Told = dict[int, tuple[str, bool]]
"""Per payment, the last thing its model was told about the charge: (the text, whether it was
a result rather than an error)."""


def parametrize(metafunc: pytest.Metafunc) -> None:
    """`mode` and `latency_ms` over the suite's corners, or all four with `--crash-matrix=full`."""
    if "mode" in metafunc.fixturenames:
        full = metafunc.config.getoption("crash_matrix") == "full"
        metafunc.parametrize(("mode", "latency_ms"), FULL if full else SUITE)


def size(config: pytest.Config, suite_payments: int = SUITE_PAYMENTS) -> tuple[int, str, str]:
    """(payments, SIGKILL probability at each place, identity: `position`, or the control's
    `call_id`). Payments: `--crash-payments`, else the matrix's own `suite_payments`."""
    option = config.getoption
    payments = option("crash_payments") or suite_payments
    return payments, option("crash_kill_p"), option("crash_identity")


def set_corner(stage: Any, workdir: Path, mode: str, latency_ms: int) -> None:
    """charge_card against the payments sandbox in `mode`, answering after `latency_ms`."""
    load(charge_tool_file(workdir, stage.payments.url, mode))
    # A not-found proves absence one second after the call (a crash leaves no doubt for long).
    Tool.objects.filter(name="charge_card").update(settle_after=timedelta(seconds=1))
    faults = {
        "reference_only": mode == "lookup-only",
        "ignore_keys": mode == "statement",
        "latency": latency_ms,
    }
    stage.payments.set_faults(**{k: v for k, v in faults.items() if v})


def run_until_done(
    stage: Any,
    script: Path,
    args: list[str],
    env: dict[str, str],
    unfinished: Callable[[], list[int]],
) -> Counter[str]:
    """Run the agent, restarting it after each SIGKILL, until every conversation has ended.
    Returns the kills by place."""
    kills: Counter[str] = Counter()
    # Each round a new process, forked from one that imported the framework once.
    with ForkServer(script, stage.env(EFFECT_LEDGER_LEASE_SECONDS="2", **env)) as agent:
        for _ in range(ROUNDS):
            done = agent.run(*args, timeout=900)
            kills.update(
                line.split()[1] for line in done.stdout.splitlines() if line[:5] == "KILL "
            )
            if done.returncode == 0 and len(unfinished()) == 0:
                return kills
            assert done.returncode in (0, -signal.SIGKILL), done.stderr[-3000:]
    raise AssertionError(f"conversations still running after {ROUNDS} rounds: {unfinished()}")


class StatementImports:
    """The provider's statement of each second up to `lag` seconds ago, fetched and imported
    as final every `period` seconds in a thread of the test process, while the agent's resumed
    conversations wait for the ledger to settle their effects (the daily `fetch_statement`
    schedule, made fast), and the lines held earlier looked at again after each import (the
    every-minute `statement-held-lines` schedule, `ledger.statements.held`, made fast too). A
    line imported while its effect is still `dispatching` under a live lease is `held`; once
    the lease has run out, the revisit settles the effect from it (before it did, 2 of 50
    payments stayed `unknown` with a 1 s lag)."""

    def __init__(self, stage: Any, period: float = 0.5, lag: float = 1.0) -> None:
        self.url, self.period, self.lag = stage.payments.url, period, lag
        self.imported = 0
        self.revisited: Counter[str] = Counter()
        self.errors: list[BaseException] = []
        self._end = datetime.now(UTC) - timedelta(minutes=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="statements", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.period):
                self.catch_up()
                self.revisited.update(held.revisit())
        except Exception as exc:  # kept for the test, which fails on it at `stop`
            self.errors.append(exc)
        finally:
            connection.close()  # the thread's own connection, or the test DB stays in use

    def catch_up(self) -> None:
        """Import [the last import's end, now - lag) as a final statement."""
        start, end = self._end, datetime.now(UTC) - timedelta(seconds=self.lag)
        if end <= start:
            return
        query = {"from": start.isoformat(), "to": end.isoformat(), "format": "csv"}
        response = httpx.get(f"{self.url}/statements", params=query, timeout=10, trust_env=False)
        response.raise_for_status()
        import_statement(
            "charge_card", response.content, filename="statement.csv", period_start=start,
            period_end=end, provisional=False, by="system:statements", origin="fetch",
        )  # fmt: skip
        self._end = end
        self.imported += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self.errors, self.errors


IN_DOUBT = (Status.DISPATCHING, Status.UNKNOWN, Status.AWAITING_CONFIRMATION)


def in_doubt(stage: Any) -> int:
    """The agent's effects whose outcome the ledger still does not know."""
    return Effect.objects.filter(agent=stage.agent, status__in=IN_DOUBT).count()


# What an imported statement did to an effect: confirmed it from its line, or proved it never
# arrived (back to `planned` while attempts remain, else `failed`).
BY_STATEMENT = ("statement_line", "never_received", "never_sent")


def settled_by_statements(stage: Any) -> Counter[str]:
    """The agent's effects each statement verdict moved, by reason (an effect retried after a
    proof of absence and confirmed later counts under both)."""
    events = EffectEvent.objects.filter(effect__agent=stage.agent, reason__in=BY_STATEMENT)
    found = events.values("reason").annotate(n=Count("effect", distinct=True))
    return Counter({row["reason"]: row["n"] for row in found})


def verdict(stage: Any, payments: int, told: Told) -> Counter[str]:
    """Per payment: charges at the provider, the ledger's effects, what the model was told."""
    charges: dict[str, list[dict[str, Any]]] = {}
    for charge in stage.charges():
        charges.setdefault(charge["account"], []).append(charge)
    counts: Counter[str] = Counter()
    for i in range(payments):
        made = charges.get(f"acct_{i}", [])
        effects = list(Effect.objects.filter(agent=stage.agent, run_id=f"pay-{i}"))
        statuses = sorted(e.status for e in effects)
        failed_unsent = statuses == ["failed"] and not made
        text, result = told[i]
        counts["effects"] += len(effects)
        counts["double charges"] += len(made) > 1
        counts["uncharged"] += not made and not failed_unsent
        said_done = result and any(c["id"] in text for c in made)
        if said_done != (len(made) == 1 and statuses == ["confirmed"]):
            counts["contradictions"] += 1
            counts[f"told: {text[:60]} / ledger: {statuses}"] += 1
    return counts


def report(
    framework: str,
    sizes: tuple[int, str, str],
    corner: tuple[str, int],
    kills: Counter[str],
    counts: Counter[str],
) -> str:
    """The matrix's line for one corner."""
    (payments, _, identity), (mode, latency_ms) = sizes, corner
    return (
        f"CRASH-MATRIX {framework} ({identity}) {mode:<11} {latency_ms:>3} ms  payments "
        f"{payments}  kills {sum(kills.values())} {json.dumps(dict(sorted(kills.items())))}  "
        f"effects {counts['effects']}  double charges {counts['double charges']}  uncharged "
        f"{counts['uncharged']}  contradictions {counts['contradictions']}"
    )


def assert_no_loss_and_no_repeat(counts: Counter[str], payments: int) -> None:
    assert counts["double charges"] == 0, counts
    assert counts["uncharged"] == 0, counts
    assert counts["contradictions"] == 0, counts
    assert counts["effects"] == payments, counts  # one effect per payment, re-issued or not


# Payments of the statement corner in the suite (no kill at all: 0.61 ** 12, about 1 in 400).
STATEMENT_PAYMENTS = 12


def statement_corner(
    stage: Any,
    framework: str,
    sizes: tuple[int, str, str],
    run: Callable[[], Counter[str]],
    told: Callable[[], Told],
) -> None:
    """The statement corner: the provider ignores idempotency keys and has no lookup, so a
    crash leaves the ledger unable to tell; the agent's guard waits for the ledger (`wait=True`)
    while the provider's statement is imported as final every second (`StatementImports`),
    which confirms what it lists and sends back to `planned`, for the waiting call to run, what
    it proves never arrived. `run()` drives the agents to their end (the stage set to the
    corner already). Then: nothing in doubt, and the verdict of the other corners."""
    statements = StatementImports(stage)
    try:
        kills = run()
    finally:
        statements.stop()
    payments = sizes[0]
    counts = verdict(stage, payments, told())
    counts["in doubt"] = in_doubt(stage)
    print(report(framework, sizes, STATEMENT, kills, counts), end="")
    settled = json.dumps(dict(sorted(settled_by_statements(stage).items())))
    revisited = json.dumps(dict(statements.revisited))
    print(
        f"  in doubt {counts['in doubt']}  statements {statements.imported} {settled}"
        f"  held lines settled later {revisited}"
    )
    assert sum(kills.values()) > 0  # the crashes happened
    assert counts["in doubt"] == 0, counts
    assert_no_loss_and_no_repeat(counts, payments)
