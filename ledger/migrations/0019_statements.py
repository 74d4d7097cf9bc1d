"""Provider statements: the imports, their lines and the incidents they open
(`ledger.models.statements`, `ledger.statements`).

New tables only. Lines and incidents name effects without a foreign-key constraint: adding
one would lock the effects table (SHARE ROW EXCLUSIVE) while it is checked.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models

_ID = (
    "id",
    models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"),
)


def _count() -> models.PositiveIntegerField:
    return models.PositiveIntegerField(default=0)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0018_effect_amounts"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="StatementImport",
            fields=[
                _ID,
                ("tool", models.CharField(max_length=100)),
                ("filename", models.CharField(max_length=500)),
                ("sha256", models.CharField(max_length=64)),
                ("period_start", models.DateTimeField()),
                ("period_end", models.DateTimeField()),
                ("provisional", models.BooleanField(default=False)),
                (
                    "origin",
                    models.CharField(
                        choices=[("command", "Command"), ("upload", "Upload"), ("fetch", "Fetch")],
                        max_length=16,
                    ),
                ),
                ("imported_by", models.CharField(max_length=200)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "phase",
                    models.CharField(
                        choices=[
                            ("lines", "Lines"),
                            ("removals", "Removals"),
                            ("absence", "Absence"),
                            ("orphans", "Orphans"),
                            ("done", "Done"),
                        ],
                        default="lines",
                        max_length=16,
                    ),
                ),
                ("cursor", models.CharField(blank=True, default="", max_length=64)),
                ("revises", models.JSONField(blank=True, default=list)),
                ("orphans_checked", models.BooleanField(default=False)),
                ("lines", _count()),
                ("lines_new", _count()),
                ("lines_changed", _count()),
                ("lines_unchanged", _count()),
                ("lines_removed", _count()),
                ("lines_matched", _count()),
                ("confirmed", _count()),
                ("failed", _count()),
                ("retried", _count()),
                ("reviews", _count()),
                ("duplicates", _count()),
                ("orphans", _count()),
                ("batches", _count()),
            ],
            options={
                "indexes": [
                    models.Index(fields=["tool", "period_start"], name="stmimport_tool_period_idx")
                ],
            },
        ),
        migrations.CreateModel(
            name="StatementLine",
            fields=[
                _ID,
                ("line_no", models.PositiveIntegerField()),
                ("provider_ref", models.CharField(max_length=500)),
                ("reference", models.CharField(blank=True, max_length=500)),
                (
                    "type",
                    models.CharField(
                        choices=[
                            ("charge", "Charge"),
                            ("refund", "Refund"),
                            ("capture", "Capture"),
                            ("reversal", "Reversal"),
                            ("fee", "Fee"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("pending", "Pending"),
                        ],
                        max_length=16,
                    ),
                ),
                ("amount_minor", models.BigIntegerField()),
                ("currency", models.CharField(max_length=3)),
                ("occurred_at", models.DateTimeField()),
                ("outcome", models.CharField(blank=True, default="", max_length=32)),
                (
                    "effect",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="statement_lines",
                        to="ledger.effect",
                    ),
                ),
                (
                    "removed_by",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="ledger.statementimport",
                    ),
                ),
                (
                    "statement",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="ledger.statementimport",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Incident",
            fields=[
                _ID,
                (
                    "kind",
                    models.CharField(
                        choices=[("orphan", "Statement line no effect intended")], max_length=16
                    ),
                ),
                ("tool", models.CharField(max_length=100)),
                (
                    "severity",
                    models.PositiveSmallIntegerField(
                        choices=[(1, "low"), (2, "normal"), (3, "high")], default=3
                    ),
                ),
                (
                    "opened_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("due_at", models.DateTimeField()),
                ("acknowledged_at", models.DateTimeField(blank=True, null=True)),
                ("note", models.CharField(blank=True, default="", max_length=2000)),
                (
                    "acknowledged_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "decision",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="ledger.effect",
                    ),
                ),
                (
                    "line",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="incident",
                        to="ledger.statementline",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="statementline",
            index=models.Index(
                condition=models.Q(("effect__isnull", False)),
                fields=["effect"],
                name="stmline_effect_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="statementline",
            index=models.Index(
                condition=models.Q(("effect__isnull", False), ("outcome", "")),
                fields=["statement", "effect"],
                name="stmline_apply_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="statementline",
            index=models.Index(
                condition=models.Q(("effect__isnull", True), ("removed_by__isnull", True)),
                fields=["statement", "line_no"],
                name="stmline_unmatched_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="statementline",
            index=models.Index(
                condition=models.Q(("removed_by__isnull", False)),
                fields=["removed_by", "id"],
                name="stmline_removed_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="statementline",
            constraint=models.UniqueConstraint(
                fields=("statement", "line_no"), name="stmline_line_uniq"
            ),
        ),
        migrations.AddIndex(
            model_name="incident",
            index=models.Index(
                models.OrderBy(models.F("severity"), descending=True),
                models.F("due_at"),
                condition=models.Q(("acknowledged_at__isnull", True)),
                name="incident_open_idx",
            ),
        ),
    ]
