"""The events table's monthly partitions (ADR 0016).

`ledger_effectevent` is partitioned by range of `created_at`, one partition per calendar month
in UTC, named `ledger_effectevent_YYYY_MM`, plus a DEFAULT partition,
`ledger_effectevent_default`. Months are created ahead of time, by the migration that
partitioned the table (up to `AHEAD` months from then) and by a daily schedule
(`ensure_ahead`, `reconcilers.schedules`), so the default partition stays empty: it is there
so that an insert never fails, should the schedule stop for months or a row carry an older
time (a backfill). Its cost is that attaching a month must prove that the default partition
holds no row of that month: a CHECK constraint saying so is added NOT VALID and validated
first (SHARE UPDATE EXCLUSIVE: agents carry on), so that ATTACH skips the scan. A month
whose rows are in the default partition already cannot get a partition of its own
(`create_month` says so and leaves it there; the rows stay, sealed and verified like any
other, and are not archived).

A month is created without holding up agents: an empty table shaped like the events, a CHECK
constraint matching its range (validated at once, the table being empty), then
`ATTACH PARTITION`, which takes SHARE UPDATE EXCLUSIVE on the events table and skips its scans
thanks to the constraints, under a 1 s `lock_timeout`, retried.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime

from django.db import connection, transaction
from django.db.utils import IntegrityError, OperationalError
from django.utils import timezone

from ledger.models import EffectEvent

log = logging.getLogger("ledger.partitions")

EVENTS = EffectEvent._meta.db_table
# Months kept ready beyond the current one.
AHEAD = 3
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '1s'"
TRIES = 10
_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


@dataclass(frozen=True)
class Partition:
    name: str
    # First day of the month it holds (UTC), and the first day of the next.
    start: date
    end: date

    @property
    def month(self) -> str:
        return f"{self.start:%Y-%m}"


def month_of(moment: datetime | date) -> date:
    if isinstance(moment, datetime):
        moment = moment.astimezone(UTC).date()
    return moment.replace(day=1)


def shift(month: date, months: int) -> date:
    index = month.year * 12 + month.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def name_of(month: date) -> str:
    return f"{EVENTS}_{month:%Y_%m}"


def bound(month: date) -> str:
    return f"{month.isoformat()} 00:00:00+00"


def partitions() -> list[Partition]:
    """The events table's partitions, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [EVENTS],
        )
        rows = cursor.fetchall()
    found = []
    for name, expression in rows:
        match = _BOUND.search(expression or "")
        if match:
            start, end = (month_of(datetime.fromisoformat(v)) for v in match.groups())
            found.append(Partition(name, start, end))
    return sorted(found, key=lambda p: p.start)


def partition_of(month: date) -> Partition | None:
    return next((p for p in partitions() if p.start == month), None)


def retrying(work: Callable, tries: int = TRIES) -> None:
    """`work(cursor)` in a transaction of its own under a 1 s lock_timeout, run again (with a
    growing pause) when a lock was not granted in time: it never queues agents for longer."""
    for attempt in range(tries):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(LOCK_TIMEOUT)
                # Deferred foreign-key checks still pending in the session would refuse the
                # ALTER (none are, outside a caller's open transaction).
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                work(cursor)
            return
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != "55P03" or attempt == tries - 1:
                raise
            time.sleep(min(5.0, 0.2 * (attempt + 1)))


def _exclude_from_default(month: date) -> str | None:
    """A validated CHECK on the default partition that no row of `month` is there, so that
    ATTACH does not scan it; the constraint's name, or None when rows of `month` are there."""
    default, name = f"{EVENTS}_default", f"{EVENTS}_default_not_{month:%Y_%m}"
    low, high = bound(month), bound(shift(month, 1))
    retrying(
        lambda cursor: cursor.execute(
            f"ALTER TABLE {default} ADD CONSTRAINT {name} "
            f"CHECK (NOT (created_at >= '{low}' AND created_at < '{high}')) NOT VALID"
        )
    )
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {default} VALIDATE CONSTRAINT {name}")
    except IntegrityError:
        retrying(lambda cursor: cursor.execute(f"ALTER TABLE {default} DROP CONSTRAINT {name}"))
        return None
    return name


def create_month(month: date) -> bool:
    """Create and attach the partition of `month`; False when it exists already, or when
    rows of that month are in the default partition (logged)."""
    if partition_of(month):
        return False
    name, low, high = name_of(month), bound(month), bound(shift(month, 1))
    excluded = _exclude_from_default(month)
    if excluded is None:
        log.error("events of %s are in the default partition: it gets no partition", month)
        return False

    def work(cursor) -> None:
        cursor.execute(
            f"CREATE TABLE {name} (LIKE {EVENTS} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        cursor.execute(
            f"ALTER TABLE {name} ADD CONSTRAINT {name}_range "
            f"CHECK (created_at >= '{low}' AND created_at < '{high}')"
        )
        cursor.execute(
            f"ALTER TABLE {EVENTS} ATTACH PARTITION {name} FOR VALUES FROM ('{low}') TO ('{high}')"
        )
        # The partition bound says the same from now on.
        cursor.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name}_range")
        cursor.execute(f"ALTER TABLE {EVENTS}_default DROP CONSTRAINT {excluded}")

    retrying(work)
    log.info("created events partition %s", name)
    return True


def default_rows() -> int:
    """Rows in the default partition: none while months are created ahead."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {EVENTS}_default")
        return cursor.fetchone()[0]


def ensure_ahead(months: int = AHEAD) -> list[str]:
    """The schedule: the current month and the next `months` have partitions. Returns the
    names created."""
    current = month_of(timezone.now())
    created = []
    for n in range(months + 1):
        month = shift(current, n)
        if create_month(month):
            created.append(name_of(month))
    return created
