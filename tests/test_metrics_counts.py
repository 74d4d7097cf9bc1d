"""The effects-by-status gauges come from counts PostgreSQL keeps as effects are written
(`ledger/sql/effect_counts.sql`): right after every kind of write, folded or not, and a scrape
never scans the effects table."""

from __future__ import annotations

import re

from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from ledger.effects.transitions import transition
from ledger.models import Effect, EffectCount, EffectCountDelta
from ledger.models.states import Status
from ledger.observability import effectcounts
from tests.helpers import expire_lease
from tests.test_metrics import scrape, value  # noqa: F401 (the fixture)

_EFFECTS = re.compile(r'(?<![\w"])"?ledger_effect"?(?![\w"])')


def _grouped() -> dict[tuple[str, str, str, str], int]:
    """What the counts must say: the effects table grouped, the slow way."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.mode, e.kind, e.tool, e.status, count(*) FROM ledger_effect e "
            "JOIN ledger_agent a ON a.id = e.agent_id GROUP BY 1, 2, 3, 4"
        )
        return {tuple(row[:4]): row[4] for row in cursor.fetchall()}


def _lifecycle(alice) -> None:
    """Every kind of write: inserts planned and dispatching, outcomes, a cancel, an unknown
    made planned again by recovery, a compensated one. (Effects are never deleted: their
    events protect them.)"""
    done = alice.intent(step_id="done", claim=True)
    alice.outcome(done["id"], done["lease_token"])
    failed = alice.intent(step_id="failed", claim=True)
    alice.outcome(failed["id"], failed["lease_token"], "failed")
    cancelled = alice.intent(step_id="cancelled")
    alice.post(f"/effects/{cancelled['id']}/cancel", {"reason": "not needed"})
    lost = alice.intent(step_id="lost", tool="get_balance", request={}, claim=True)
    expire_lease(lost["id"])
    alice.post("/recovery", {})
    alice.intent(step_id="live", tool="create_ticket", claim=True)
    effect = Effect.objects.get(pk=done["id"])
    assert transition(effect, Status.COMPENSATED, actor="test", reason="x").status == "compensated"


def test_the_counts_are_right_after_every_kind_of_write_before_and_after_a_fold(alice):
    _lifecycle(alice)

    assert effectcounts.effect_counts() == _grouped()
    assert EffectCountDelta.objects.exists()
    assert effectcounts.fold() > 0
    assert not EffectCountDelta.objects.exists()
    assert effectcounts.effect_counts() == _grouped()
    # Half folded, half not: the same numbers.
    alice.intent(step_id="after-the-fold")
    assert effectcounts.effect_counts() == _grouped()
    assert effectcounts.fold() == 1


def test_a_write_that_rolls_back_or_is_refused_counts_nothing(alice):
    planned = alice.intent(step_id="planned")
    before = effectcounts.effect_counts()
    # planned → confirmed is not a transition the FSM trigger allows.
    with connection.cursor() as cursor:
        cursor.execute("SAVEPOINT refused")
        try:
            cursor.execute(
                "UPDATE ledger_effect SET status = 'confirmed' WHERE id = %s", [planned["id"]]
            )
            raise AssertionError("the FSM trigger let planned → confirmed through")
        except DatabaseError:
            cursor.execute("ROLLBACK TO SAVEPOINT refused")
    assert effectcounts.effect_counts() == before == _grouped()


def test_the_gauges_add_up_every_agents_counts(alice, bob, scrape):  # noqa: F811
    _lifecycle(alice)
    bob.intent(step_id="bobs")

    samples = scrape()

    expected: dict[tuple[str, str], int] = {}
    for (_, _, tool, status), n in _grouped().items():
        expected[tool, status] = expected.get((tool, status), 0) + n
    for (tool, status), n in expected.items():
        assert value(samples, "ledger_effects", tool=tool, status=status) == n


def test_a_scrape_never_scans_the_effects_table(alice, scrape):  # noqa: F811
    _lifecycle(alice)
    with CaptureQueriesContext(connection) as captured:
        scrape()
    reads = [q["sql"] for q in captured if _EFFECTS.search(q["sql"])]
    assert not [sql for sql in reads if re.search(r"GROUP BY[^)]*\bstatus\b", sql)]
    with connection.cursor() as cursor:
        # Without a sequential scan to fall back on, a query no index serves still shows one.
        cursor.execute("SET LOCAL enable_seqscan = off")
        for sql in reads:
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert not re.search(r"Seq Scan on ledger_effect(?!\w)", plan), (sql, plan)
    assert EffectCount.objects.exists()
