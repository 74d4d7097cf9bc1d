"""Review items remember when they were claimed (the soft lock the effect page shows).

A nullable column without a default changes the catalogue only (no row is rewritten), but it
takes an ACCESS EXCLUSIVE lock for an instant: the `lock_timeout` makes it fail fast behind a
long transaction instead of queueing the queue's readers and writers behind it.
"""

from django.db import migrations, models

LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0022_incident_alerts"),
    ]

    operations = [
        # Forwards the timeout precedes the ALTER; backwards (operations run in reverse) the
        # second RunSQL sets it before the column is dropped.
        migrations.RunSQL(LOCK_TIMEOUT, migrations.RunSQL.noop),
        migrations.AddField(
            model_name="reviewitem",
            name="claimed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(migrations.RunSQL.noop, LOCK_TIMEOUT),
    ]
