"""Notes on review items."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0004_reviewitem_moves_to_ledger"),
        ("ledger", "0023_review_claims"),
    ]

    operations: list = []
