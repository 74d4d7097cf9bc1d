"""Four-eyes approval: the awaiting_approval state (transition table, FSM trigger, partial
indexes over incomplete effects), tools' approve_above, and retries waiting for a second
operator."""

import django.db.models.deletion
import django.db.models.functions.datetime
import pgtrigger.compiler
import pgtrigger.migrations
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0011_limits"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="RetryProposal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("evidence", models.CharField(max_length=2000)),
                ("effect_version", models.PositiveIntegerField()),
                (
                    "proposed_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("decided_at", models.DateTimeField(blank=True, null=True)),
                ("outcome", models.CharField(blank=True, max_length=16)),
            ],
        ),
        pgtrigger.migrations.RemoveTrigger(
            model_name="effect",
            name="effect_status_fsm",
        ),
        migrations.RemoveIndex(
            model_name="effect",
            name="effect_incomplete_idx",
        ),
        migrations.RemoveIndex(
            model_name="effect",
            name="effect_due_check_idx",
        ),
        migrations.RemoveIndex(
            model_name="effect",
            name="effect_unresolved_age_idx",
        ),
        migrations.AddField(
            model_name="tool",
            name="approve_above",
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=24, null=True),
        ),
        migrations.AlterField(
            model_name="effect",
            name="status",
            field=models.CharField(
                choices=[
                    ("planned", "Planned"),
                    ("dispatching", "Dispatching"),
                    ("awaiting_confirmation", "Awaiting Confirmation"),
                    ("confirmed", "Confirmed"),
                    ("failed", "Failed"),
                    ("unknown", "Unknown"),
                    ("compensated", "Compensated"),
                    ("cancelled", "Cancelled"),
                    ("awaiting_approval", "Awaiting Approval"),
                ],
                default="planned",
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="reviewitem",
            name="reason",
            field=models.CharField(
                choices=[
                    ("no_lookup", "No lookup possible"),
                    ("attempts_exhausted", "Attempts exhausted"),
                    ("reconciliation_inconclusive", "Reconciliation inconclusive"),
                    ("unresolved_past_window", "Unresolved past the window"),
                    ("possible_duplicate", "Possible duplicate"),
                    ("provider_mismatch", "Provider record differs from the request"),
                    ("not_found_unproven", "Not found, but the provider ignores keys"),
                    ("compensation_failed", "Compensation failed"),
                    ("compensation_unknown", "Compensation outcome unknown"),
                    ("manual_execution", "To be carried out by hand"),
                    ("approval_required", "Above the approval threshold (four-eyes)"),
                ],
                max_length=64,
            ),
        ),
        migrations.AddIndex(
            model_name="effect",
            index=models.Index(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "awaiting_approval",
                            "awaiting_confirmation",
                            "dispatching",
                            "planned",
                            "unknown",
                        ],
                    )
                ),
                fields=["agent", "lease_owner"],
                name="effect_incomplete_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="effect",
            index=models.Index(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "awaiting_approval",
                            "awaiting_confirmation",
                            "dispatching",
                            "planned",
                            "unknown",
                        ],
                    ),
                    ("next_check_at__isnull", False),
                ),
                fields=["next_check_at"],
                name="effect_due_check_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="effect",
            index=models.Index(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "awaiting_approval",
                            "awaiting_confirmation",
                            "dispatching",
                            "planned",
                            "unknown",
                        ],
                    )
                ),
                fields=["created_at"],
                name="effect_unresolved_age_idx",
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="effect",
            trigger=pgtrigger.compiler.Trigger(
                name="effect_status_fsm",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    declare="DECLARE _is_valid_transition BOOLEAN;",
                    func='SELECT CONCAT(OLD."status", \':\', NEW."status") = ANY(\'{awaiting_approval:cancelled,awaiting_approval:planned,awaiting_confirmation:confirmed,awaiting_confirmation:failed,awaiting_confirmation:unknown,confirmed:compensated,dispatching:awaiting_confirmation,dispatching:confirmed,dispatching:failed,dispatching:planned,dispatching:unknown,planned:cancelled,planned:dispatching,unknown:confirmed,unknown:failed,unknown:planned}\'::text[]) INTO _is_valid_transition; IF (_is_valid_transition IS FALSE AND OLD."status" IS DISTINCT FROM NEW."status") THEN RAISE EXCEPTION \'pgtrigger: Invalid transition of field "status" from "%" to "%" on table %\', OLD."status", NEW."status", TG_TABLE_NAME; ELSE RETURN NEW; END IF;',
                    hash="5c17747239b5e0fec7a3966f1c87d460783afdc7",
                    operation="UPDATE",
                    pgid="pgtrigger_effect_status_fsm_41030",
                    table="ledger_effect",
                    when="BEFORE",
                ),
            ),
        ),
        migrations.AddField(
            model_name="retryproposal",
            name="decided_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="retryproposal",
            name="effect",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="+", to="ledger.effect"
            ),
        ),
        migrations.AddField(
            model_name="retryproposal",
            name="proposal",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="ledger.effect",
            ),
        ),
        migrations.AddField(
            model_name="retryproposal",
            name="proposed_by",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddConstraint(
            model_name="retryproposal",
            constraint=models.UniqueConstraint(
                condition=models.Q(("decided_at__isnull", True)),
                fields=("effect",),
                name="retryproposal_one_pending_uniq",
            ),
        ),
    ]
