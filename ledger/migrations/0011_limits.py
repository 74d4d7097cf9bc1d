"""Limits: claims per minute and amount per day, per tool and per agent."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0010_keys_and_modes"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="limit_amount_per_day",
            field=models.JSONField(blank=True, db_default={}, default=dict),
        ),
        migrations.AddField(
            model_name="agent",
            name="limit_claims_per_minute",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="tool",
            name="amount_path",
            field=models.CharField(blank=True, db_default="", max_length=200),
        ),
        migrations.AddField(
            model_name="tool",
            name="currency_path",
            field=models.CharField(blank=True, db_default="", max_length=200),
        ),
        migrations.AddField(
            model_name="tool",
            name="limit_amount_per_day",
            field=models.JSONField(blank=True, db_default={}, default=dict),
        ),
        migrations.AddField(
            model_name="tool",
            name="limit_claims_per_minute",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="LimitCounter",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("scope", models.CharField(max_length=120)),
                ("period", models.CharField(max_length=32)),
                ("currency", models.CharField(blank=True, default="", max_length=3)),
                ("used", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("scope", "period", "currency"), name="limitcounter_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="AmountCharge",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("scope", models.CharField(max_length=120)),
                ("currency", models.CharField(max_length=3)),
                ("amount_minor", models.BigIntegerField()),
                (
                    "charged_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "effect",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="ledger.effect",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["scope", "currency", "charged_at"], name="amountcharge_window_idx"
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("effect", "scope"), name="amountcharge_once_uniq"
                    )
                ],
            },
        ),
    ]
