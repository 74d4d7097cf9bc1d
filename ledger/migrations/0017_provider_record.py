"""The provider's own record: tool declarations for proofs of absence and statements, the
effect's normalized amount and currency, tail checks, legal holds, review-item severity, and
the one duplicate reason.

Written to run while the ledger serves traffic. Every statement on the effects table changes
the catalogue only: nullable columns, or columns with a constant default (PostgreSQL stores
the default once, rewriting no row), and a trigger. They take a strong lock for an instant,
so the migration first sets a `lock_timeout`: behind a long transaction it fails fast instead
of queueing every agent behind it, and can simply be run again. The effects' amounts are
filled in by 0018, in batches.

- `ledger_request_amount(request, tool)`: the request's amount in minor units and its
  currency, read at the tool's amount_path / currency_path, in the tool's amount_unit
  (`major`: "12.50" EUR is 1250; `minor`: 1250 is 1250). NULLs where the tool declares no
  amount or the request's is unreadable: an intent is refused earlier where it matters.
- `effect_amount` (BEFORE INSERT): writes them on every new effect, whichever process or
  statement inserts it, so the columns cannot be forgotten by a path that writes effects.
- Review items opened as `possible_duplicate` become `duplicate`: the one reason for "the
  provider may hold it more than once", whatever found it.
"""

from django.db import migrations, models

LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"

AMOUNT_FUNCTIONS = [
    """
CREATE FUNCTION ledger_request_amount(p_request jsonb, p_tool text,
                                      OUT minor bigint, OUT code text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    tool record;
    raw text;
BEGIN
    SELECT amount_path, currency_path, amount_unit INTO tool
      FROM ledger_tool WHERE name = p_tool;
    IF coalesce(tool.amount_path, '') = '' OR coalesce(tool.currency_path, '') = ''
       OR jsonb_typeof(p_request) <> 'object' THEN
        RETURN;
    END IF;
    code := upper(p_request #>> string_to_array(tool.currency_path, '.'));
    IF code IS NULL OR code !~ '^[A-Z]{3}$' THEN
        code := NULL;
        RETURN;
    END IF;
    raw := p_request #>> string_to_array(tool.amount_path, '.');
    IF tool.amount_unit = 'minor' THEN
        IF raw ~ '^[0-9]{1,18}$' THEN
            minor := raw::bigint;
        END IF;
    ELSE
        minor := ledger_to_minor(raw, code);
    END IF;
END
$$
""",
    """
CREATE FUNCTION ledger_effect_amount() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    found record;
BEGIN
    found := ledger_request_amount(NEW.request::jsonb, NEW.tool);
    NEW.amount_minor := found.minor;
    NEW.currency := coalesce(found.code, '');
    RETURN NEW;
END
$$
""",
    """
CREATE TRIGGER effect_amount BEFORE INSERT ON ledger_effect
FOR EACH ROW EXECUTE FUNCTION ledger_effect_amount()
""",
]
DROP_AMOUNT_FUNCTIONS = [
    "DROP TRIGGER effect_amount ON ledger_effect",
    "DROP FUNCTION ledger_effect_amount()",
    "DROP FUNCTION ledger_request_amount(jsonb, text)",
]

RENAME_DUPLICATES = (
    "UPDATE reviews_reviewitem SET reason = 'duplicate' WHERE reason = 'possible_duplicate'"
)
# Back: the items that a late outcome opened (the only way to `possible_duplicate` before).
UNRENAME_DUPLICATES = (
    "UPDATE reviews_reviewitem SET reason = 'possible_duplicate' WHERE reason = 'duplicate'"
)

_DURATION = {"blank": True, "null": True}


def _flag() -> models.BooleanField:
    return models.BooleanField(db_default=False, default=False)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0016_review_item_copies"),
    ]

    operations = [
        migrations.RunSQL(LOCK_TIMEOUT, LOCK_TIMEOUT),
        migrations.AddField(
            model_name="effect",
            name="amount_minor",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="effect",
            name="currency",
            field=models.CharField(blank=True, db_default="", max_length=3),
        ),
        migrations.AddField(model_name="effect", name="legal_hold", field=_flag()),
        migrations.AddField(
            model_name="effect",
            name="tail_check_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="reviewitem",
            name="severity",
            field=models.PositiveSmallIntegerField(
                choices=[(1, "low"), (2, "normal"), (3, "high")], db_default=2, default=2
            ),
        ),
        migrations.AddField(
            model_name="tool",
            name="amount_unit",
            field=models.CharField(
                blank=True,
                choices=[("major", "major"), ("minor", "minor")],
                db_default="",
                max_length=5,
            ),
        ),
        migrations.AddField(
            model_name="tool", name="call_timeout", field=models.DurationField(**_DURATION)
        ),
        migrations.AddField(model_name="tool", name="fetch_statements", field=_flag()),
        migrations.AddField(model_name="tool", name="halt_on_duplicate", field=_flag()),
        migrations.AddField(
            model_name="tool", name="lookup_horizon", field=models.DurationField(**_DURATION)
        ),
        migrations.AddField(model_name="tool", name="lookup_proves_absence", field=_flag()),
        migrations.AddField(
            model_name="tool", name="search_lag", field=models.DurationField(**_DURATION)
        ),
        migrations.AddField(
            model_name="tool",
            name="statement_columns",
            field=models.JSONField(blank=True, db_default={}, default=dict),
        ),
        migrations.AddField(
            model_name="tool",
            name="statement_reference",
            field=models.CharField(
                choices=[("idempotency_key", "idempotency key"), ("effect_id", "effect id")],
                db_default="idempotency_key",
                default="idempotency_key",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="tool", name="statement_skew", field=models.DurationField(**_DURATION)
        ),
        migrations.AddField(
            model_name="tool",
            name="statement_status",
            field=models.JSONField(blank=True, db_default={}, default=dict),
        ),
        migrations.AddField(model_name="tool", name="statements", field=_flag()),
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
                ],
                max_length=16,
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
                ],
                max_length=64,
            ),
        ),
        migrations.RunSQL(AMOUNT_FUNCTIONS, DROP_AMOUNT_FUNCTIONS),
        migrations.RunSQL(RENAME_DUPLICATES, UNRENAME_DUPLICATES),
    ]
