"""Placeholder: filled in by the change that needs it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0019_statements"),
    ]

    operations = []
