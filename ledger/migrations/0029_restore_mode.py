"""Restore mode (`ledger.restore`): its windows, the review reason `restored_gap`, the alert
kind `restore`, and two transitions into unknown (planned → unknown, awaiting_approval →
unknown) that only entering restore mode takes. The effects table's trigger is replaced under
a short `lock_timeout`, as 0025's statements are: behind a long transaction it fails fast and
is run again rather than queueing every agent. The fingerprints of `LEDGER_KEYS` versions
(`KeyFingerprint`) let a ledger started with other keys against a restored database refuse to
start."""

import django.db.models.functions.datetime
import django.db.models.lookups
import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models

LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0028_teams"),
    ]

    operations = [
        migrations.RunSQL(LOCK_TIMEOUT, LOCK_TIMEOUT),
        migrations.CreateModel(
            name="RestoreWindow",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("lost_since", models.DateTimeField()),
                (
                    "started_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[("witness", "Witness"), ("manual", "Manual")], max_length=8
                    ),
                ),
                ("started_by", models.CharField(max_length=200)),
                ("reason", models.CharField(max_length=2000)),
                ("findings", models.JSONField(blank=True, default=list)),
                ("fork_seq", models.BigIntegerField()),
                ("lost_head", models.JSONField(blank=True, default=dict)),
                ("applied", models.JSONField(blank=True, default=dict)),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                ("ended_by", models.CharField(blank=True, max_length=200)),
                ("end_reason", models.CharField(blank=True, max_length=2000)),
            ],
        ),
        pgtrigger.migrations.RemoveTrigger(
            model_name="effect",
            name="effect_status_fsm",
        ),
        migrations.AlterField(
            model_name="alert",
            name="kind",
            field=models.CharField(
                choices=[
                    ("review_due_soon", "Review item 75% through its time"),
                    ("review_overdue", "Review item overdue"),
                    ("halt", "Halt"),
                    ("limit_exceeded", "Limit exceeded"),
                    ("incident_opened", "Incident opened"),
                    ("callback", "Effect status changed (agent callback)"),
                    ("restore", "Restore mode entered"),
                ],
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
                    ("duplicate", "Duplicate at the provider"),
                    ("provider_mismatch", "Provider record differs from the request"),
                    ("not_found_unproven", "Not found, but the provider ignores keys"),
                    ("compensation_failed", "Compensation failed"),
                    ("compensation_unknown", "Compensation outcome unknown"),
                    ("manual_execution", "To be carried out by hand"),
                    ("approval_required", "Above the approval threshold (four-eyes)"),
                    ("amount_mismatch", "Statement amount differs from the request"),
                    ("statement_contradicts_record", "The provider's record contradicts ours"),
                    ("statement_line_removed", "Line removed by a statement revision"),
                    ("restored_gap", "May have moved in a lost window (restore)"),
                ],
                max_length=64,
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="effect",
            trigger=pgtrigger.compiler.Trigger(
                name="effect_status_fsm",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    declare="DECLARE _is_valid_transition BOOLEAN;",
                    func='SELECT CONCAT(OLD."status", \':\', NEW."status") = ANY(\'{awaiting_approval:cancelled,awaiting_approval:planned,awaiting_approval:unknown,awaiting_confirmation:confirmed,awaiting_confirmation:failed,awaiting_confirmation:unknown,confirmed:compensated,dispatching:awaiting_confirmation,dispatching:confirmed,dispatching:failed,dispatching:planned,dispatching:unknown,planned:cancelled,planned:dispatching,planned:unknown,unknown:confirmed,unknown:failed,unknown:planned}\'::text[]) INTO _is_valid_transition; IF (_is_valid_transition IS FALSE AND OLD."status" IS DISTINCT FROM NEW."status") THEN RAISE EXCEPTION \'pgtrigger: Invalid transition of field "status" from "%" to "%" on table %\', OLD."status", NEW."status", TG_TABLE_NAME; ELSE RETURN NEW; END IF;',
                    hash="b126c15614d8efd80ca680ee628495b7f4eef79b",
                    operation="UPDATE",
                    pgid="pgtrigger_effect_status_fsm_41030",
                    table="ledger_effect",
                    when="BEFORE",
                ),
            ),
        ),
        migrations.AddConstraint(
            model_name="restorewindow",
            constraint=models.UniqueConstraint(
                django.db.models.lookups.IsNull(models.F("ended_at"), True),
                condition=models.Q(("ended_at__isnull", True)),
                name="one_open_restore_window",
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="restorewindow",
            trigger=pgtrigger.compiler.Trigger(
                name="restorewindow_bumps_config",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="INSERT INTO ledger_configversion (id, version, changed_at) VALUES (1, nextval('ledger_configversion_seq'), now()) ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, changed_at = EXCLUDED.changed_at; RETURN NULL;",
                    hash="4ead6f672197788ac80c4d0e4d1dc4dd2ef6c0fb",
                    level="STATEMENT",
                    operation="INSERT OR UPDATE OR DELETE OR TRUNCATE",
                    pgid="pgtrigger_restorewindow_bumps_config_9b004",
                    table="ledger_restorewindow",
                    when="AFTER",
                ),
            ),
        ),
        migrations.CreateModel(
            name="KeyFingerprint",
            fields=[
                ("version", models.PositiveIntegerField(primary_key=True, serialize=False)),
                ("fingerprint", models.CharField(max_length=64)),
                (
                    "recorded_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
        ),
        migrations.AlterField(
            model_name="statementimport",
            name="origin",
            field=models.CharField(
                choices=[
                    ("command", "Command"),
                    ("upload", "Upload"),
                    ("fetch", "Fetch"),
                    ("sweep", "Sweep"),
                ],
                max_length=16,
            ),
        ),
    ]
