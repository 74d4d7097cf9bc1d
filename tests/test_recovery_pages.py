"""POST /recovery's pages: most urgent first, an opaque cursor, a bounded page, counts of what is
unfinished only, and reads that never reach the agent's finished effects."""

from __future__ import annotations

import base64
import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.models import Effect
from tests.helpers import expire_lease


def _ids(body: dict) -> list[str]:
    return [item["effect"]["id"] for item in body["effects"]]


def _all_pages(alice, body: dict, limit: int) -> list[dict]:
    pages = []
    while True:
        response = alice.post("/recovery", {**body, "limit": limit})
        assert response.status_code == 200, response.content
        pages.append(response.json())
        cursor = pages[-1]["next_cursor"]
        if cursor is None:
            return pages
        body = {**body, "cursor": cursor}


@pytest.fixture
def mixed(alice) -> dict[str, list[str]]:
    """Two effects of each urgency, created in an order that mixes them, and a finished one."""
    made: dict[str, list[str]] = {"planned": [], "lost": [], "in_hand": []}
    for n in range(2):
        live = alice.intent(step_id=f"live-{n}", claim=True)
        made["in_hand"].append(live["id"])
        lost = alice.intent(step_id=f"lost-{n}", tool="create_ticket", claim=True)
        expire_lease(lost["id"])
        made["lost"].append(lost["id"])
        made["planned"].append(alice.intent(step_id=f"planned-{n}")["id"])
    done = alice.intent(step_id="done", claim=True)
    alice.outcome(done["id"], done["lease_token"])
    return made


def test_pages_come_most_urgent_first_then_oldest_first_and_cover_everything_once(alice, mixed):
    pages = _all_pages(alice, {"dry_run": True}, limit=2)

    assert [len(page["effects"]) for page in pages] == [2, 2, 2]
    # The test's effects share one creation time (one transaction): the id orders them.
    assert [_ids(page) for page in pages] == [
        sorted(mixed["planned"]),
        sorted(mixed["lost"]),
        sorted(mixed["in_hand"]),
    ]
    assert [item["action"] for page in pages for item in page["effects"]] == [
        "retry_safe",
        "retry_safe",
        "reconcile",
        "reconcile",
        "wait",
        "wait",
    ]
    assert pages[-1]["next_cursor"] is None


def test_counts_are_of_unfinished_effects_only(alice, mixed):
    body = alice.post("/recovery", {"dry_run": True, "limit": 1}).json()
    assert body["counts_by_status"] == {"planned": 2, "dispatching": 4}


def test_applying_plans_page_by_page_shows_each_effect_once(alice):
    lost = []
    for n in range(3):
        effect = alice.intent(step_id=f"read-{n}", tool="get_balance", request={}, claim=True)
        expire_lease(effect["id"])
        lost.append(effect["id"])

    pages = _all_pages(alice, {}, limit=1)

    # Each went back to planned as its page was answered: planned sorts before lost, so a
    # later page never shows it again.
    assert [_ids(page) for page in pages] == [[effect] for effect in sorted(lost)]
    assert {item["action"] for page in pages for item in page["effects"]} == {"retry_safe"}
    assert set(Effect.objects.filter(id__in=lost).values_list("status", flat=True)) == {"planned"}


def test_the_default_page_and_ledger_recovery_limit_bound_an_answer(alice, settings):
    for n in range(3):
        alice.intent(step_id=f"planned-{n}")
    settings.LEDGER_RECOVERY_LIMIT = 2
    body = alice.post("/recovery", {"dry_run": True, "limit": 1000}).json()
    assert len(body["effects"]) == 2 and body["next_cursor"] is not None


def _b64(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "not a cursor",
        "%%%",
        _b64({"a": 1}),
        _b64(["0", "2026-01-01T00:00:00+00:00"]),
        _b64(["9", "2026-01-01T00:00:00+00:00", "6fd5c60a-1a43-4b7a-b492-15787f31f6b8"]),
        _b64(["x", "2026-01-01T00:00:00+00:00", "6fd5c60a-1a43-4b7a-b492-15787f31f6b8"]),
        _b64(["0", "2026-01-01T00:00:00", "6fd5c60a-1a43-4b7a-b492-15787f31f6b8"]),
        _b64(["0", "yesterday", "6fd5c60a-1a43-4b7a-b492-15787f31f6b8"]),
        _b64(["0", "2026-01-01T00:00:00+00:00", "not-a-uuid"]),
        _b64([0, "2026-01-01T00:00:00+00:00", "6fd5c60a-1a43-4b7a-b492-15787f31f6b8"]),
    ],
)
def test_a_cursor_the_api_did_not_issue_is_422_naming_it(alice, cursor):
    response = alice.post("/recovery", {"cursor": cursor})
    assert response.status_code == 422, response.content
    assert response.json()["error"] == "validation_error"
    assert "cursor" in response.json()["fields"]


@pytest.mark.parametrize(
    "body", [{"limit": 0}, {"limit": 1001}, {"limit": "5"}, {"limit": 1.5}, {"cursor": ""}]
)
def test_a_bad_limit_or_an_empty_cursor_is_422(alice, body):
    response = alice.post("/recovery", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"] == "validation_error"


def _explain(cursor, sql: str) -> str:
    cursor.execute(f"EXPLAIN {sql}")
    return "\n".join(row[0] for row in cursor.fetchall())


def test_recovery_reads_unfinished_effects_through_a_partial_index(alice, mixed):
    for n in range(5):
        done = alice.intent(step_id=f"finished-{n}", claim=True)
        alice.outcome(done["id"], done["lease_token"])
    with CaptureQueriesContext(connection) as captured:
        alice.post("/recovery", {"dry_run": True, "limit": 2, "run_id": "run-1"})
        alice.post("/recovery", {"dry_run": True, "owner": "worker-1"})
    reads = [q["sql"] for q in captured if re.search(r'FROM "ledger_effect"(?!\w)', q["sql"])]
    by_status = [sql for sql in reads if '"ledger_effect"."status" IN' in sql]
    assert reads and by_status
    with connection.cursor() as cursor:
        # Without a sequential scan to fall back on, a query no index serves still shows one.
        cursor.execute("SET LOCAL enable_seqscan = off")
        for sql in reads:
            plan = _explain(cursor, sql)
            assert not re.search(r"Seq Scan on ledger_effect(?!\w)", plan), (sql, plan)
        # On a table this small the planner may as well take another index and filter; which
        # one it picks depends on statistics. What must hold is that the partial index *can*
        # serve the reads by status (their conditions imply its predicate): with every other
        # droppable index gone (rolled back with the test's transaction), it is the one used.
        cursor.execute(
            """SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
               WHERE x.indrelid = 'ledger_effect'::regclass
                 AND i.relname <> 'effect_incomplete_idx'
                 AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)"""
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX "{name}"')
        for sql in by_status:
            plan = _explain(cursor, sql)
            assert "effect_incomplete_idx" in plan, (sql, plan)
