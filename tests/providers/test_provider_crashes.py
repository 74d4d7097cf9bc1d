"""Crashes around a real provider's call, for every provider with a crash-test caller
(`devstack.crashtest.callers`): a new provider gets this test by writing its caller.

Agents record and claim their effects from the live ledger over HTTP and call the provider
through its SDK against its fake; 35 are SIGKILLed before the call (claimed, nothing sent), 35
while the fake holds the request (carried out after the agent died, unless the kill beat the
request out) and 35 after the provider answered (the answer never reported); 5 run to the end.
Then the ledger's own recovery through the adapter, and a restarted agent for what it planned
again. Every provider: the kills where planned, no record at the provider beyond one per
effect, the answer a dead agent got is the reference the ledger found, and an agent asking for
every effect afterwards is given no lease (nothing is sent again).

Where the tool proves absence (`callers.machine_only`), every effect ends confirmed with exactly
one record, what never left sent again once, nothing left to a person. Where it cannot
(SendGrid), nothing is sent again: what was sent is confirmed, what was not is left to a person.
Who confirms an effect whose answer was lost is the provider's own expectation (`EXPECT`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from devstack.crashtest import callers
from tests.providers.crash_agent import POINTS
from tests.providers.crash_kit import CrashRun, Tally, plan

# Committed as it goes: the reconciler's "due" is the database's now(), which one enclosing
# transaction would hold still, and the agents and the callbacks reach the ledger over HTTP.
pytestmark = pytest.mark.django_db(transaction=True)

PER_POINT = 35  # 105 SIGKILLs per provider
CONTROLS = 5  # agents that run to the end
RECOVERY_TIMEOUT = 60.0  # seconds


@dataclass(frozen=True)
class Expect:
    """What one provider's crash test shows beyond what every provider's does."""

    # Who confirms an effect whose agent died holding the provider's answer: the reconciler's
    # lookup, or the provider's signed callback where no lookup can see the record in time.
    lost_answers_confirmed_by: str = "reconciler"


EXPECT = {"sendgrid": Expect(lost_answers_confirmed_by="callback")}


@pytest.mark.parametrize("name", callers.names())
def test_agents_killed_around_the_call_leave_no_extra_record(name, request):
    began = time.monotonic()
    run = CrashRun(name, request)
    try:
        run.crash(plan(PER_POINT, CONTROLS))
        crashed = time.monotonic()
        run.recover(RECOVERY_TIMEOUT)
        tally = run.tally()
    finally:
        run.close()
    point = {w["run_id"]: w["point"] for w in run.workflows}
    print(summary(name, tally, point, crashed - began, time.monotonic() - crashed))

    assert tally.kills == dict.fromkeys(POINTS, PER_POINT) and tally.kills.total() >= 100
    assert tally.exits == {-9: 3 * PER_POINT, 0: CONTROLS}
    assert tally.extra() == 0, {r: n for r, n in tally.held.items() if n > 1}
    assert tally.asked_again >= PER_POINT and tally.leases_on_asking_again == 0
    assert tally.answered and all(tally.refs[r] == ref for r, ref in tally.answered.items())
    by_point = {p: {r for r in point if point[r] == p} for p in (*POINTS, "none")}
    for run_id in by_point["after"] | by_point["none"]:
        assert (tally.held[run_id], tally.statuses[run_id]) == (1, "confirmed"), run_id
    lost = {tally.confirmed_by[r] for r in by_point["after"]}
    assert lost == {EXPECT.get(name, Expect()).lost_answers_confirmed_by}
    assert {tally.confirmed_by[r] for r in by_point["none"]} == {"agent"}
    assert not tally.again & (by_point["after"] | by_point["none"])
    if callers.machine_only(run.caller):
        # Absence proven: what never left was sent again once, and nobody is asked.
        assert set(tally.statuses.values()) == {"confirmed"}, tally.statuses
        assert set(tally.held.values()) == {1}
        assert by_point["before"] <= tally.again and not tally.in_review
    else:
        # Nothing proves absence: nothing is sent again, what never left goes to a person.
        assert not tally.again
        for run_id, held in tally.held.items():
            left = (0, "unknown", "not_found_unproven")
            settled = (1, "confirmed", None)
            ended = (held, tally.statuses[run_id], tally.in_review.get(run_id))
            assert ended in (left, settled), run_id
        assert not any(tally.held[r] for r in by_point["before"])


def summary(name: str, tally: Tally, point: dict[str, str], crashing: float, after: float) -> str:
    confirmed = sum(1 for status in tally.statuses.values() if status == "confirmed")
    in_flight = sum(1 for r in tally.again if point[r] == "during")
    kills = "/".join(str(tally.kills[p]) for p in POINTS)
    return (
        f"\n{name} crashes: {kills} kills before/during/after, {len(point)} effects, "
        f"{sum(tally.held.values())} records ({tally.extra()} extra), {confirmed} confirmed, "
        f"{len(tally.in_review)} left to people, {len(tally.again)} sent again ({in_flight} "
        f"of them killed in flight); crashing {crashing:.1f} s, recovery and checks {after:.1f} s"
    )
