"""Placeholder: filled in by the change that needs it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0015_event_created_at_index"),
    ]

    operations = []
