"""An index on the events' (created_at, id): the order auditor exports stream rows in.

Without it, an export of one day's events read the whole events table and sorted what matched;
with it, PostgreSQL walks the date range in index order and sends rows as it finds them, with
no sort (`ledger.exports`).

Written to run while the ledger serves traffic: `atomic = False`, and the index is built with
CREATE INDEX CONCURRENTLY, which takes SHARE UPDATE EXCLUSIVE on the events table, so agents
keep appending events while it builds (tests/test_migration_locks.py holds every migration
from this one on to that). `ledger_effectevent` is a plain table, not a partitioned one, so
the concurrent build applies to it directly.

A build that fails part-way (a deadlock, a cancelled statement) leaves an INVALID index
behind that PostgreSQL maintains but never reads: drop it with
`DROP INDEX CONCURRENTLY event_created_idx` before running the migration again.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0014_limits_in_postgres"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="effectevent",
            index=models.Index(fields=["created_at", "id"], name="event_created_idx"),
        ),
    ]
