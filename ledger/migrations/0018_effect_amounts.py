"""The amounts of effects written before 0017, and the tail checks' index.

Written to run while the ledger serves traffic (`atomic = False`, each step commits on its
own): the existing effects get their amount and currency in batches of `BATCH` rows in id
order, each its own short transaction (an agent's outcome on one of them waits at most for one
batch); effects inserted meanwhile have them from 0017's trigger and are skipped. The index is
built with CREATE INDEX CONCURRENTLY.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# Effects per UPDATE: within the budget of rows one migration transaction may hold locked.
BATCH = 1000


def fill_amounts(apps, schema_editor) -> None:
    Effect = apps.get_model("ledger", "Effect")
    Tool = apps.get_model("ledger", "Tool")
    effects = Effect._meta.db_table
    priced = list(
        Tool.objects.exclude(amount_path="")
        .exclude(currency_path="")
        .values_list("name", flat=True)
    )
    if not priced:
        return
    with schema_editor.connection.cursor() as cursor:
        after = None
        while True:
            cursor.execute(
                f"SELECT max(id::text)::uuid FROM (SELECT id FROM {effects} "
                "WHERE tool = ANY(%s) AND (%s::uuid IS NULL OR id > %s::uuid) "
                "ORDER BY id LIMIT %s) batch",
                [priced, after, after, BATCH],
            )
            (upto,) = cursor.fetchone()
            if upto is None:
                return
            cursor.execute(
                f"UPDATE {effects} e SET amount_minor = a.minor, currency = coalesce(a.code, '') "
                "FROM (SELECT id, (ledger_request_amount(request::jsonb, tool)).* "
                f"      FROM {effects} WHERE tool = ANY(%s) "
                "       AND (%s::uuid IS NULL OR id > %s::uuid) AND id <= %s) a "
                "WHERE e.id = a.id AND e.amount_minor IS NULL AND a.minor IS NOT NULL",
                [priced, after, after, upto],
            )
            after = upto


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0017_provider_record"),
    ]

    operations = [
        migrations.RunPython(fill_amounts, migrations.RunPython.noop, elidable=True),
        AddIndexConcurrently(
            model_name="effect",
            index=models.Index(
                condition=models.Q(("tail_check_at__isnull", False)),
                fields=["tail_check_at"],
                name="effect_tail_check_idx",
            ),
        ),
    ]
