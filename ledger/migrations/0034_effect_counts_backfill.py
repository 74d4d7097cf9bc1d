"""The counts of the effects that were there before 0033's triggers (issue 34, item 5).

One statement, so one snapshot: it counts the effects table and deletes the deltas that the
same snapshot sees. A change committed before the snapshot is in the count and its delta is
deleted; one committed after is not in the count and its delta stays for the next fold. So the
counts are exact while agents keep writing, and the statement takes no lock on the effects
table but the one every read takes. It reads the whole table once (about a second per million
effects). Going back empties the counts.
"""

from django.db import migrations

BACKFILL = """
WITH seen AS (DELETE FROM ledger_effectcountdelta RETURNING 1)
INSERT INTO ledger_effectcount (agent_id, kind, tool, status, n)
SELECT agent_id, kind, tool, status, count(*) FROM ledger_effect
 GROUP BY agent_id, kind, tool, status
ON CONFLICT (agent_id, kind, tool, status) DO UPDATE SET n = excluded.n
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0033_effect_counts"),
    ]

    operations = [
        migrations.RunSQL(
            BACKFILL, ["DELETE FROM ledger_effectcount", "DELETE FROM ledger_effectcountdelta"]
        ),
    ]
