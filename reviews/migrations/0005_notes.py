"""Notes on review items: an append-only table (a trigger refuses UPDATE and DELETE)."""

import django.db.models.deletion
import django.db.models.functions.datetime
import pgtrigger.compiler
import pgtrigger.migrations
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0004_reviewitem_moves_to_ledger"),
        ("ledger", "0023_review_claims"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ReviewNote",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[("note", "note"), ("lost_decision", "lost decision")],
                        default="note",
                        max_length=20,
                    ),
                ),
                ("text", models.TextField()),
                ("details", models.JSONField(blank=True, default=dict)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "author",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "effect",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="ledger.effect",
                    ),
                ),
                (
                    "item",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="notes",
                        to="ledger.reviewitem",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["effect", "id"], name="reviewnote_effect_idx")],
            },
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="reviewnote",
            trigger=pgtrigger.compiler.Trigger(
                name="reviewnote_append_only",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;",  # noqa: E501
                    hash="d8c609a10d9415953d0c2a874431fada32b6de67",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_reviewnote_append_only_e47a5",
                    table="reviews_reviewnote",
                    when="BEFORE",
                ),
            ),
        ),
    ]
