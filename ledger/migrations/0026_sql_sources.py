"""The SQL rules' current text moves to `ledger/sql/`: this migration loads the files for the
rules that older migrations wrote as literals (limits 0014 and 0021, notifications 0013, review
item copies 0016, amounts 0017), so that each rule is read in one place. The definitions are
the same as those migrations left them (tests/test_sql_sources.py compares the database with
the files): nothing changes in behaviour.

Re-creating the triggers changes the catalogue only, under a short `lock_timeout` as 0017 and
0025 do. Going back leaves the definitions as they are, which is what the older migrations
made.
"""

from django.db import migrations

from ledger.sql import statements

LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0025_requested_by"),
    ]

    operations = [
        migrations.RunSQL(LOCK_TIMEOUT, LOCK_TIMEOUT),
        migrations.RunSQL(
            statements("limits")
            + statements("notifications")
            + statements("amounts")
            + statements("review_items"),
            migrations.RunSQL.noop,
        ),
    ]
