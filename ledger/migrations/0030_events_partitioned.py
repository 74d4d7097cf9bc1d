"""The events table, partitioned by month on `created_at`, converted while the ledger serves.

PostgreSQL cannot turn a plain table into a partitioned one in place, so the conversion builds
the partitioned table beside it and swaps the two:

1. `build`: an empty partitioned table `ledger_effectevent_p` with the events' columns, its
   own id sequence, the foreign key to the effects, the events' indexes, one partition per
   month from the oldest event's month (at the latest the previous month) to `AHEAD` months
   from now (`ledger.audit.partitions` keeps creating months ahead from then on), and a
   DEFAULT partition for any row outside them.
2. `mirror`: a trigger on the live table copies every row inserted or redacted from now on
   into the new table, so nothing written during the copy is missed.
3. `copy`: the rows already there, in id order, `BATCH` per transaction.
4. `swap`: under a `lock_timeout` of 1 s (retried), one short transaction takes the live
   table ACCESS EXCLUSIVE, drops the mirror and the seals' foreign key (`EventSeal.event`
   becomes a plain unique column that the sealer checks), renames the old table away and the
   new one in, hands the id sequence over past the last id and installs the append-only
   trigger on the partitioned table (PostgreSQL clones it onto every partition, present and
   future). Nothing in it reads or writes rows.
5. `drop`: the old table, under the same short timeout.

The database's primary key becomes (id, created_at), since a partitioned table's keys must
hold the partition key; Django keeps `id` as the pk (ids come from one sequence). Reversing
rebuilds a plain table in one transaction: it holds the events table for as long as the copy
takes, which is for a rollback in a maintenance window, not under load.
"""

import time
from datetime import UTC, timedelta

from django.db import connection, migrations, models, transaction
from django.db.utils import OperationalError
from django.utils import timezone

EVENTS = "ledger_effectevent"
NEW = "ledger_effectevent_p"
OLD = "ledger_effectevent_old"
SEQUENCE = "ledger_effectevent_id_seq"
AHEAD = 3
BATCH = 1000
WAIT = "SET LOCAL lock_timeout = '1s'"
TRIES = 30
COLUMNS = "id, kind, actor, from_status, to_status, reason, data, digest, created_at, effect_id"
EFFECT_FK = "ledger_effectevent_effect_id_a0b78a1e_fk_ledger_effect_id"
SEAL_FK = "ledger_eventseal_event_id_ef912d96_fk_ledger_effectevent_id"
# The append-only trigger as 0020 left it: same function, name and hash.
PGID = "pgtrigger_event_append_only_05827"
PGHASH = "e7b6f67400af661819787355e55c1872f1b7b6e7"
INDEXES = (
    ("event_timeline_idx", "(effect_id, id)", ""),
    ("event_created_idx", "(created_at, id)", ""),
    (
        "event_recovery_idx",
        "(id)",
        " WHERE kind::text = 'reconciliation'::text OR actor::text ~~ 'system:%'::text",
    ),
)
COLUMN_TYPES = """
    kind varchar(16) NOT NULL,
    actor varchar(200) NOT NULL,
    from_status varchar(32) NOT NULL,
    to_status varchar(32) NOT NULL,
    reason varchar(2000) NOT NULL,
    data jsonb NOT NULL,
    digest varchar(64) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    effect_id uuid NOT NULL
        CONSTRAINT {fk} REFERENCES ledger_effect(id) DEFERRABLE INITIALLY DEFERRED
"""


def _retrying(work) -> None:
    """`work(cursor)` in a transaction of its own under a 1 s lock_timeout; run again when the
    lock was not granted in time, so that it never queues agents behind a long transaction."""
    for attempt in range(TRIES):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(WAIT)
                work(cursor)
            return
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != "55P03" or attempt == TRIES - 1:
                raise
            time.sleep(min(5.0, 0.2 * (attempt + 1)))


def _months(cursor) -> list:
    cursor.execute(f"SELECT min(created_at) FROM {EVENTS}")
    oldest = cursor.fetchone()[0]
    today = timezone.now().date().replace(day=1)
    first = (today - timedelta(days=1)).replace(day=1)
    if oldest is not None:
        first = min(first, oldest.astimezone(UTC).date().replace(day=1))
    months, month = [], first
    last = _shift(today, AHEAD)
    while month <= last:
        months.append(month)
        month = _shift(month, 1)
    return months


def _shift(month, n: int):
    index = month.year * 12 + month.month - 1 + n
    return month.replace(year=index // 12, month=index % 12 + 1, day=1)


def build(apps, schema_editor) -> None:
    def work(cursor) -> None:
        cursor.execute(f"CREATE SEQUENCE {NEW}_id_seq")
        cursor.execute(
            f"CREATE TABLE {NEW} (id bigint NOT NULL DEFAULT nextval('{NEW}_id_seq'), "
            + COLUMN_TYPES.format(fk=EFFECT_FK)
            + f", CONSTRAINT {NEW}_pkey PRIMARY KEY (id, created_at)) "
            "PARTITION BY RANGE (created_at)"
        )
        cursor.execute(f"ALTER SEQUENCE {NEW}_id_seq OWNED BY {NEW}.id")
        for name, columns, where in INDEXES:
            cursor.execute(f"CREATE INDEX {name}_p ON {NEW} {columns}{where}")
        # Rows for a month without a partition of its own (see ledger.audit.partitions).
        cursor.execute(f"CREATE TABLE {EVENTS}_default PARTITION OF {NEW} DEFAULT")
        for month in _months(cursor):
            cursor.execute(
                f"CREATE TABLE {EVENTS}_{month:%Y_%m} PARTITION OF {NEW} "
                f"FOR VALUES FROM ('{month} 00:00:00+00') TO ('{_shift(month, 1)} 00:00:00+00')"
            )

    _retrying(work)


def mirror(apps, schema_editor) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE OR REPLACE FUNCTION ledger_event_mirror() RETURNS trigger AS $$ BEGIN "
            f"INSERT INTO {NEW} ({COLUMNS}) SELECT {COLUMNS} FROM (SELECT NEW.*) AS r "
            "ON CONFLICT (id, created_at) DO UPDATE SET data = EXCLUDED.data; "
            "RETURN NULL; END $$ LANGUAGE plpgsql"
        )
    _retrying(
        lambda cursor: cursor.execute(
            f"CREATE TRIGGER ledger_event_mirror AFTER INSERT OR UPDATE ON {EVENTS} "
            "FOR EACH ROW EXECUTE FUNCTION ledger_event_mirror()"
        )
    )


def copy(apps, schema_editor) -> None:
    after = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"WITH batch AS (SELECT {COLUMNS} FROM {EVENTS} WHERE id > %s "
                f"ORDER BY id LIMIT {BATCH}), "
                f"copied AS (INSERT INTO {NEW} ({COLUMNS}) SELECT {COLUMNS} FROM batch "
                "ON CONFLICT (id, created_at) DO NOTHING) "
                "SELECT max(id) FROM batch",
                [after],
            )
            last = cursor.fetchone()[0]
        if last is None:
            return
        after = last


def _swap_work(cursor) -> None:
    cursor.execute(f"LOCK TABLE {EVENTS} IN ACCESS EXCLUSIVE MODE")
    cursor.execute(f"DROP TRIGGER ledger_event_mirror ON {EVENTS}")
    cursor.execute(f"ALTER TABLE ledger_eventseal DROP CONSTRAINT IF EXISTS {SEAL_FK}")
    for name in [f"{EVENTS}_pkey"] + [name for name, _, _ in INDEXES]:
        cursor.execute(f"ALTER INDEX {name} RENAME TO {name}_old")
    cursor.execute(f"ALTER TABLE {EVENTS} RENAME TO {OLD}")
    cursor.execute(f"ALTER SEQUENCE {SEQUENCE} RENAME TO {OLD}_id_seq")
    cursor.execute(f"ALTER TABLE {NEW} RENAME TO {EVENTS}")
    cursor.execute(f"ALTER INDEX {NEW}_pkey RENAME TO {EVENTS}_pkey")
    for name, _, _ in INDEXES:
        cursor.execute(f"ALTER INDEX {name}_p RENAME TO {name}")
    cursor.execute(f"ALTER SEQUENCE {NEW}_id_seq RENAME TO {SEQUENCE}")
    cursor.execute(
        f"SELECT setval('{SEQUENCE}', greatest((SELECT last_value FROM {OLD}_id_seq), "
        f"(SELECT coalesce(max(id), 0) + 1 FROM {EVENTS})))"
    )
    cursor.execute(
        f"CREATE TRIGGER {PGID} BEFORE UPDATE OR DELETE ON {EVENTS} "
        f"FOR EACH ROW EXECUTE FUNCTION {PGID}()"
    )
    cursor.execute(f"COMMENT ON TRIGGER {PGID} ON {EVENTS} IS '{PGHASH}'")


def swap(apps, schema_editor) -> None:
    _retrying(_swap_work)


def drop(apps, schema_editor) -> None:
    _retrying(lambda cursor: cursor.execute(f"DROP TABLE {OLD}"))
    with connection.cursor() as cursor:
        cursor.execute("DROP FUNCTION ledger_event_mirror()")


def unpartition(apps, schema_editor) -> None:
    """Back to one plain table, in one transaction (see the module's docstring)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {EVENTS} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(
            f"CREATE TABLE {OLD} (id bigint GENERATED BY DEFAULT AS IDENTITY, "
            + COLUMN_TYPES.format(fk=EFFECT_FK + "_plain")
            + ")"
        )
        cursor.execute(f"INSERT INTO {OLD} ({COLUMNS}) SELECT {COLUMNS} FROM {EVENTS}")
        cursor.execute(f"SELECT last_value FROM {SEQUENCE}")
        last = cursor.fetchone()[0]
        cursor.execute(f"DROP TABLE {EVENTS}")
        cursor.execute(f"ALTER TABLE {OLD} RENAME TO {EVENTS}")
        cursor.execute(f"ALTER TABLE {EVENTS} RENAME CONSTRAINT {EFFECT_FK}_plain TO {EFFECT_FK}")
        cursor.execute(f"ALTER SEQUENCE {OLD}_id_seq RENAME TO {SEQUENCE}")
        cursor.execute(f"SELECT setval('{SEQUENCE}', %s)", [last])
        cursor.execute(f"ALTER TABLE {EVENTS} ADD CONSTRAINT {EVENTS}_pkey PRIMARY KEY (id)")
        for name, columns, where in INDEXES:
            cursor.execute(f"CREATE INDEX {name} ON {EVENTS} {columns}{where}")
        cursor.execute(
            f"ALTER TABLE ledger_eventseal ADD CONSTRAINT {SEAL_FK} FOREIGN KEY (event_id) "
            f"REFERENCES {EVENTS}(id) DEFERRABLE INITIALLY DEFERRED"
        )
        cursor.execute(
            f"CREATE TRIGGER {PGID} BEFORE UPDATE OR DELETE ON {EVENTS} "
            f"FOR EACH ROW EXECUTE FUNCTION {PGID}()"
        )
        cursor.execute(f"COMMENT ON TRIGGER {PGID} ON {EVENTS} IS '{PGHASH}'")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0029_restore_mode"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(build, migrations.RunPython.noop),
                migrations.RunPython(mirror, migrations.RunPython.noop),
                migrations.RunPython(copy, migrations.RunPython.noop),
                migrations.RunPython(swap, migrations.RunPython.noop),
                migrations.RunPython(drop, unpartition),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="eventseal",
                    name="event",
                    field=models.OneToOneField(
                        db_constraint=False,
                        on_delete=models.DO_NOTHING,
                        related_name="seal",
                        to="ledger.effectevent",
                    ),
                ),
            ],
        ),
    ]
