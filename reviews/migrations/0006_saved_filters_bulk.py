"""Saved queue filters and bulk jobs."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0005_notes"),
        ("ledger", "0024_search_indexes"),
    ]

    operations: list = []
