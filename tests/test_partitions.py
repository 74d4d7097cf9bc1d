"""The events table partitioned by month (migration 0030, `ledger.audit.partitions`): a
populated table is converted with every row kept and the chain intact, rows written during
the conversion are not missed, new events land in their month's partition, months are
created ahead, every partition is append-only, and other database backends are refused."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder
from django.db.utils import DatabaseError

from ledger.audit import partitions, seal
from ledger.models import EffectEvent
from ledger.policy import digests
from tests.factories import tampering
from tests.helpers import ROOT

BEFORE = ("ledger", "0029_restore_mode")
CONVERSION = ("ledger", "0030_events_partitioned")
MONTHS = ("2026-08-03", "2026-09-15", "2026-10-31 23:59:59", "2026-11-01", "2026-12-01 00:00:01")


@pytest.fixture
def old_effect(make_effect) -> Any:
    """An effect made before the database goes back to before the conversion: the model has
    columns that later migrations add."""
    return make_effect()


@pytest.fixture
def before_conversion(old_effect) -> Iterator[MigrationExecutor]:
    """The database migrated to just before the conversion; to the end again afterwards."""
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    yield executor
    fresh = MigrationExecutor(connection)
    fresh.migrate(fresh.loader.graph.leaf_nodes())


def seed(effect: Any, per_month: int = 3) -> list[int]:
    """Events across five months (by direct insert, as old rows would be), sealed."""
    ids = []
    with connection.cursor() as cursor:
        for day in MONTHS:
            for n in range(per_month):
                cursor.execute(
                    "INSERT INTO ledger_effectevent (kind, actor, from_status, to_status, "
                    "reason, data, digest, created_at, effect_id) VALUES ('transition', "
                    "'test', 'planned', 'planned', %s, %s, %s, %s::timestamptz, %s) RETURNING id",
                    [
                        f"{day} #{n}",
                        f'{{"n": {n}}}',
                        digests.content_digest({"n": n}),
                        day,
                        effect.id,
                    ],
                )
                ids.append(cursor.fetchone()[0])
    assert seal.seal_pending(grace=0) == len(ids)
    return ids


def rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, reason, data::text, digest, created_at FROM ledger_effectevent ORDER BY id"
        )
        return cursor.fetchall()


def where(event_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM ledger_effectevent WHERE id = %s", [event_id]
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_populated_table_is_converted_with_every_row_and_the_chain_intact(
    before_conversion, old_effect
):
    ids = seed(old_effect)
    kept = rows()
    before_conversion.loader.build_graph()
    before_conversion.migrate(before_conversion.loader.graph.leaf_nodes())

    assert rows() == kept
    assert [p.month for p in partitions.partitions()][:5] == [d[:7] for d in MONTHS]
    assert where(ids[0]) == "ledger_effectevent_2026_08"
    assert where(ids[8]) == "ledger_effectevent_2026_10"
    assert where(ids[9]) == "ledger_effectevent_2026_11"
    verdict = seal.verify()
    assert verdict.intact and verdict.count == len(ids)
    # The sequence carries on past the copied ids, and a new event goes to this month.
    effect_id = EffectEvent.objects.get(id=ids[0]).effect_id
    event = EffectEvent.objects.create(
        effect_id=effect_id, kind="transition", actor="test", digest=digests.content_digest({})
    )
    assert event.id > max(ids)
    assert where(event.id) == partitions.name_of(partitions.month_of(event.created_at))
    assert seal.seal_pending(grace=0) == 1
    assert seal.verify().intact


@pytest.mark.django_db(transaction=True)
def test_rows_written_and_redacted_during_the_copy_are_not_missed(before_conversion, old_effect):
    ids = seed(old_effect, per_month=1)
    conversion = importlib.import_module("ledger.migrations.0030_events_partitioned")
    conversion.build(None, None)
    conversion.mirror(None, None)
    # An agent writes while the copy has not reached the end; retention redacts an old row.
    effect_id = EffectEvent.objects.get(id=ids[0]).effect_id
    written = EffectEvent.objects.create(
        effect_id=effect_id, kind="transition", actor="live", digest="0" * 64
    )
    with tampering() as cursor:
        cursor.execute(
            "UPDATE ledger_effectevent SET data = '{\"redacted\": true}' WHERE id = %s", [ids[1]]
        )
    kept = rows()
    conversion.copy(None, None)
    conversion.swap(None, None)
    conversion.drop(None, None)
    MigrationRecorder(connection).record_applied(*CONVERSION)

    assert rows() == kept
    assert where(written.id).startswith("ledger_effectevent_20")


@pytest.mark.django_db
def test_months_are_created_ahead_and_once():
    current = partitions.month_of(date.today())
    made = partitions.ensure_ahead(6)
    names = {p.name for p in partitions.partitions()}
    assert {partitions.name_of(partitions.shift(current, n)) for n in range(7)} <= names
    assert partitions.name_of(partitions.shift(current, 6)) in made
    assert partitions.ensure_ahead(6) == []


@pytest.mark.django_db
@pytest.mark.parametrize("statement", ["UPDATE {t} SET reason = 'changed'", "DELETE FROM {t}"])
def test_every_partition_refuses_updates_and_deletes(make_effect, statement):
    effect = make_effect()
    future = partitions.shift(partitions.month_of(date.today()), 5)
    partitions.create_month(future)
    table = partitions.name_of(future)
    with connection.cursor() as cursor:
        for day in (date.today(), future):
            cursor.execute(
                "INSERT INTO ledger_effectevent (kind, actor, from_status, to_status, reason, "
                "data, digest, created_at, effect_id) VALUES ('transition', 'test', '', '', "
                "'', '{}', '', %s, %s)",
                [day, effect.id],
            )
    for name in (partitions.name_of(partitions.month_of(date.today())), table):
        refused = f"Cannot update or delete rows from {name}"
        with pytest.raises(DatabaseError, match=refused), connection.cursor() as cursor:
            cursor.execute("SAVEPOINT s")
            try:
                cursor.execute(statement.format(t=name))
            finally:
                cursor.execute("ROLLBACK TO SAVEPOINT s")


def test_a_database_backend_other_than_postgresqls_own_is_refused():
    # A URL the database settings read as PostgreSQL, through another backend.
    env = {**os.environ, "DATABASE_URL": "timescale://postgres@127.0.0.1:5432/ledger"}
    run = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert (
        "The ledger runs on PostgreSQL only (django.db.backends.postgresql), not on "
        "'timescale.db.backends.postgresql'"
    ) in run.stderr


@pytest.mark.django_db
def test_a_row_for_a_month_without_a_partition_goes_to_the_default_one(make_effect):
    effect = make_effect()
    long_ago = date(2019, 3, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_effectevent (kind, actor, from_status, to_status, reason, "
            "data, digest, created_at, effect_id) VALUES ('transition', 'test', '', '', "
            "'', '{}', '', %s, %s) RETURNING id",
            [long_ago, effect.id],
        )
        event_id = cursor.fetchone()[0]
    assert where(event_id) == "ledger_effectevent_default"
    assert partitions.default_rows() == 1
    # Its month cannot be given a partition now; another month still can.
    assert partitions.create_month(long_ago) is False
    assert partitions.create_month(date(2019, 4, 1)) is True
    assert where(event_id) == "ledger_effectevent_default"


@pytest.mark.django_db
def test_pgtrigger_sees_the_trigger_installed_once_not_its_clones_on_the_partitions(capsys):
    # django-pgtrigger lists only triggers without a parent (tgparentid = 0): PostgreSQL's
    # clones on each partition are neither reported as its own nor offered for pruning.
    partitions.create_month(partitions.shift(partitions.month_of(date.today()), 7))
    call_command("pgtrigger", "ls")  # it prints to standard output
    listed = capsys.readouterr().out
    lines = [line for line in listed.splitlines() if "event_append_only" in line]
    assert len(lines) == 1 and "INSTALLED" in lines[0] and "UNINSTALLED" not in lines[0]
    assert "PRUNE" not in listed
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_trigger t JOIN pg_inherits i ON i.inhrelid = t.tgrelid "
            "WHERE i.inhparent = 'ledger_effectevent'::regclass "
            "AND t.tgname = 'pgtrigger_event_append_only_05827'"
        )
        clones = cursor.fetchone()[0]
    assert clones == len(partitions.partitions()) + 1  # and the default partition


@pytest.mark.django_db
def test_a_seal_is_never_written_for_an_event_that_is_not_there(make_effect):
    event_id = seed_one(make_effect())
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {seal._SEALED_COLUMNS} FROM ledger_effectevent e WHERE id = %s", [event_id]
        )
        row = cursor.fetchone()
    gone = (event_id + 1000, *row[1:])
    # As the sealer writes them, in a transaction: refused whole.
    refused = "1 of 2 events to seal are gone: no seal written"
    with (
        pytest.raises(RuntimeError, match=refused),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        seal._insert_links(cursor, [row, gone], 0, seal.GENESIS)
    assert seal.seal_pending(grace=0) == 1
    assert seal.verify().intact


def seed_one(effect) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_effectevent (kind, actor, from_status, to_status, reason, "
            "data, digest, effect_id) VALUES ('transition', 'test', '', '', '', '{}', %s, %s) "
            "RETURNING id",
            [digests.content_digest({}), effect.id],
        )
        return cursor.fetchone()[0]
