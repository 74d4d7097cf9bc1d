"""Tools may declare a business key (`key_fields`): the request fields whose values identify the
action, from which the server derives the effect key (`ledger.effects.businesskeys`). A column
with a database default on the tools table, which no hot statement locks."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0026_sql_sources"),
    ]

    operations = [
        migrations.AddField(
            model_name="tool",
            name="key_fields",
            field=models.JSONField(blank=True, db_default=[], default=list),
        ),
    ]
