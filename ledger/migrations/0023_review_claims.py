"""Review items remember when they were claimed (the soft lock the effect page shows)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0022_incident_alerts"),
    ]

    operations: list = []
