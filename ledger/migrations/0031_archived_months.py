"""Checkpoints of archived months (`manage.py archive`, `ledger.audit.archive`)."""

import django.db.models.functions.datetime
import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0030_events_partitioned"),
    ]

    operations = [
        migrations.CreateModel(
            name="ArchivedMonth",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("month", models.DateField(unique=True)),
                ("partition", models.CharField(max_length=63)),
                ("events", models.BigIntegerField()),
                ("first_event_id", models.BigIntegerField(null=True)),
                ("last_event_id", models.BigIntegerField(null=True)),
                ("first_seq", models.BigIntegerField(null=True)),
                ("last_seq", models.BigIntegerField(null=True)),
                ("cut_seq", models.BigIntegerField()),
                ("cut_hash", models.CharField(max_length=64)),
                ("beyond_cut", models.JSONField(blank=True, default=list)),
                ("location", models.CharField(max_length=1000)),
                ("digests", models.JSONField(default=dict)),
                (
                    "archived_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("archived_by", models.CharField(max_length=200)),
            ],
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="archivedmonth",
            trigger=pgtrigger.compiler.Trigger(
                name="archived_month_append_only",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;",
                    hash="ea99093fef81a61116a60e83b4cae5224697df3e",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_archived_month_append_only_c00c3",
                    table="ledger_archivedmonth",
                    when="BEFORE",
                ),
            ),
        ),
    ]
