"""A lost lease gives its attempt back (`ledger/sql/lost_leases.sql`, ADR 0018): the column
`lost_leases` and its trigger; and the review reason and alert kind of a request sent twice in
one run (`ledger.containment.repeated`) and its event kind, which change no column.

The column has a constant default and the trigger changes the catalogue only: both under a
short `lock_timeout`, as 0033 does. Going back drops the trigger and its function.
"""

from django.db import migrations, models

from ledger.sql import statements

LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"
DROP = [
    "DROP TRIGGER IF EXISTS effect_lost_lease ON ledger_effect",
    "DROP FUNCTION IF EXISTS ledger_lost_lease()",
]


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0034_effect_counts_backfill"),
    ]

    operations = [
        migrations.RunSQL(LOCK_TIMEOUT, LOCK_TIMEOUT),
        migrations.AddField(
            model_name="effect",
            name="lost_leases",
            field=models.IntegerField(db_default=0),
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
                    ("repeated_request", "Same request sent twice in one run"),
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
                    ("repeated_request", "Same request sent twice in one run"),
                ],
                max_length=64,
            ),
        ),
        migrations.AlterField(
            model_name="effectevent",
            name="kind",
            field=models.CharField(
                choices=[
                    ("intent", "Intent"),
                    ("transition", "Transition"),
                    ("late_outcome", "Late Outcome"),
                    ("reconciliation", "Reconciliation"),
                    ("decision", "Decision"),
                    ("statement", "Statement"),
                    ("retention_purge", "Retention Purge"),
                    ("review_closed", "Review Closed"),
                    ("repeated", "Repeated"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunSQL(statements("lost_leases"), DROP),
    ]
