"""Placeholder: filled in by the change that needs it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0018_effect_amounts"),
    ]

    operations = []
