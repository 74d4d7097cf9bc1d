"""Alerts: resolve_within and the outbox."""

import uuid

import django.db.models.functions.datetime
from django.db import migrations, models

import ledger.jsonenc


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0008_halts"),
    ]

    operations = [
        migrations.AddField(
            model_name="tool",
            name="resolve_within",
            field=models.DurationField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="Alert",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("review_due_soon", "Review item 75% through its time"),
                            ("review_overdue", "Review item overdue"),
                            ("halt", "Halt"),
                            ("limit_exceeded", "Limit exceeded"),
                        ],
                        max_length=32,
                    ),
                ),
                ("key", models.CharField(max_length=300)),
                (
                    "payload",
                    models.JSONField(
                        decoder=ledger.jsonenc.ExactJSONDecoder,
                        default=dict,
                        encoder=ledger.jsonenc.ExactJSONEncoder,
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("leased_until", models.DateTimeField(blank=True, null=True)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("delivered", models.JSONField(blank=True, default=list)),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
                ("last_error", models.CharField(blank=True, max_length=2000)),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("sent_at__isnull", True)),
                        fields=["leased_until", "created_at"],
                        name="alert_unsent_idx",
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("kind", "key"), name="alert_once_uniq")
                ],
            },
        ),
    ]
