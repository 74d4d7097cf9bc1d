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
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from devstack.harness import charge_tool_file
from ledger.models import Effect, Tool
from ledger.policy.toolfile import load

# (provider mode, provider latency in ms): `keys` honours idempotency keys; `lookup-only`
# keeps them as a searchable reference only, so a lookup's late not-found proves absence.
FULL = [("keys", 0), ("keys", 50), ("lookup-only", 0), ("lookup-only", 50)]
# The suite runs two opposite corners (each latency and each mode once, to keep `make test`
# short); `make crashtest-frameworks` runs the four (`--crash-matrix=full`).
SUITE = [("keys", 50), ("lookup-only", 0)]
ROUNDS = 400

Told = dict[int, tuple[str, bool]]
"""Per payment, the last thing its model was told about the charge: (the text, whether it was
a result rather than an error)."""


def parametrize(metafunc: pytest.Metafunc) -> None:
    """`mode` and `latency_ms` over the suite's corners, or all four with `--crash-matrix=full`."""
    if "mode" in metafunc.fixturenames:
        full = metafunc.config.getoption("crash_matrix") == "full"
        metafunc.parametrize(("mode", "latency_ms"), FULL if full else SUITE)


def size(config: pytest.Config) -> tuple[int, str, str]:
    """(payments, SIGKILL probability at each place, identity: `position`, or the control's
    `call_id`)."""
    option = config.getoption
    return option("crash_payments"), option("crash_kill_p"), option("crash_identity")


def set_corner(stage: Any, workdir: Path, mode: str, latency_ms: int) -> None:
    """charge_card against the payments sandbox in `mode`, answering after `latency_ms`."""
    load(charge_tool_file(workdir, stage.payments.url, mode))
    # A not-found proves absence one second after the call (a crash leaves no doubt for long).
    Tool.objects.filter(name="charge_card").update(settle_after=timedelta(seconds=1))
    faults = {"reference_only": mode == "lookup-only", "latency": latency_ms}
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
    for _ in range(ROUNDS):
        done = stage.run_python(script, *args, timeout=900, EFFECT_LEDGER_LEASE_SECONDS="2", **env)
        kills.update(line.split()[1] for line in done.stdout.splitlines() if line[:5] == "KILL ")
        if done.returncode == 0 and len(unfinished()) == 0:
            return kills
        assert done.returncode in (0, -signal.SIGKILL), done.stderr[-3000:]
    raise AssertionError(f"conversations still running after {ROUNDS} rounds: {unfinished()}")


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
