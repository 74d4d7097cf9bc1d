"""After a transactional test the database is emptied by truncating only what needs it
(tests/fixtures/flush.py): it must leave what Django's flush leaves, table by table and row by
row, and fall back to Django's flush when a test changed what `post_migrate` writes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.utils import timezone
from django_q.models import Schedule

from ledger.audit import seal
from ledger.containment.keys import issue_key
from ledger.models import Agent, ConfigVersion, EventSeal, ReviewItem, Team
from ledger.policy.toolfile import load
from reviews.models import ReviewNote
from tests.fixtures.flush import Emptier, emptier
from tests.helpers import ROOT, AgentClient

pytestmark = pytest.mark.usefixtures("transactional_db")

# Columns that a flush does not reset (sequences run on) and times: left out of the comparison.
_DRIFTING = {"id", "version", "changed_at", "created_at", "updated_at", "last_used_at"}


def _fill() -> None:
    """Rows in many tables, as a test of the agent API and the pages leaves them."""
    load(ROOT / "tools.toml")
    agent = Agent.objects.create(name="alice", team=Team.objects.create(name="Ops", slug="ops"))
    alice = AgentClient(agent, issue_key(agent))
    effect = alice.intent(run_id="r1", step_id="s1")
    claimed = alice.claim(effect["id"])
    alice.outcome(effect["id"], claimed["lease_token"], provider_ref="ch_1")
    doubtful = alice.intent(run_id="r1", step_id="s2")
    operator = User.objects.create_user("operator", password="x")
    # Rows of the append-only tables, whose guards refuse a DELETE.
    item = ReviewItem.objects.create(
        effect_id=doubtful["id"], reason="duplicate", due_at=timezone.now()
    )
    ReviewNote.objects.create(item=item, effect_id=doubtful["id"], author=operator, text="seen")
    seal.seal_pending(grace=0)
    assert EventSeal.objects.exists()


def _state() -> dict[str, Any]:
    """Every table's rows, without the columns a flush lets drift."""
    state = {}
    with connection.cursor() as cursor:
        for table in sorted(connection.introspection.django_table_names(only_existing=True)):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            names = [column.name for column in cursor.description]
            keep = [i for i, name in enumerate(names) if name not in _DRIFTING]
            rows = sorted(repr([row[i] for i in keep]) for row in cursor.fetchall())
            if rows:
                state[table] = rows
    return state


def _content_types_by_key() -> list[str]:
    return sorted(f"{ct.app_label}.{ct.model}" for ct in ContentType.objects.all())


def test_the_quick_way_leaves_what_djangos_flush_leaves():
    quick = emptier()
    _fill()
    full_before = quick.full_flushes
    quick.full()
    assert quick.full_flushes == full_before + 1
    after_django = _state()
    version_before = ConfigVersion.objects.get().version

    _fill()
    quick_before = quick.quick_flushes
    quick.empty()
    assert quick.quick_flushes == quick_before + 1, "the quick way was not taken"
    assert _state() == after_django
    # The configuration version moved, as after Django's flush: no process keeps a cached
    # tool, key or policy across tests.
    assert ConfigVersion.objects.get().version > version_before
    assert Agent.objects.count() == User.objects.count() == 0
    assert Permission.objects.exists() and Schedule.objects.exists()


@pytest.mark.parametrize(
    "change",
    [
        lambda: Schedule.objects.all().delete(),
        lambda: ContentType.objects.filter(app_label="ledger").delete(),
        lambda: Permission.objects.filter(codename__startswith="view_").update(name="renamed"),
    ],
    ids=["schedules deleted", "content types deleted", "permissions renamed"],
)
def test_a_change_to_what_post_migrate_writes_is_undone_by_djangos_flush(change):
    quick = emptier()
    quick.empty()
    types = _content_types_by_key()
    schedules = sorted(Schedule.objects.values_list("name", flat=True))
    change()
    full_before = quick.full_flushes
    quick.empty()
    assert quick.full_flushes == full_before + 1
    assert _content_types_by_key() == types
    assert sorted(Schedule.objects.values_list("name", flat=True)) == schedules
    assert not Permission.objects.filter(name="renamed").exists()


def test_the_quick_way_is_quicker(capsys):
    """Not a benchmark: the quick way must not cost what Django's costs (best of three each)."""
    own = Emptier("default")
    own.empty()  # learns the tables, by a full flush
    quick, full = [], []
    for _ in range(3):
        _fill()
        started = time.perf_counter()
        own.empty()
        quick.append(time.perf_counter() - started)
        _fill()
        started = time.perf_counter()
        own.full()
        full.append(time.perf_counter() - started)
    with capsys.disabled():
        print(f"\nemptying: quick {min(quick):.3f} s, Django's {min(full):.3f} s (best of 3)")
    assert own.quick_flushes == 3
    assert min(quick) < min(full)
