"""Placeholder: filled in by the change that needs it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0014_limits_in_postgres"),
    ]

    operations = []
