"""`ReviewItem` now belongs to the ledger app (`ledger.0005`); the table stays where it is."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0003_review_resolution"),
        ("ledger", "0005_reviewitem_moves_here"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ReviewItem")],
            database_operations=[],
        ),
    ]
