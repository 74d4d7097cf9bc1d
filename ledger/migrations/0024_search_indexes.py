"""Indexes for the queue's exact-match search."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0023_review_claims"),
    ]

    operations: list = []
