"""Review items carry copies of their effect's tool, agent, run and creation time, and an
index per filter and sort.

The review queue filtered by tool used to join every open item to its effect before it could
pick a page; with the copies (written by a trigger on every new item, `COPIES_TRIGGER`) it
filters, sorts and pages on the review-item table alone.

Written to run while the ledger serves traffic (`atomic = False`, each step commits on its own):

1. Four nullable columns: adding them changes only the catalogue. The agent's foreign key is
   checked against `ledger_agent` (a few rows), never against the effects.
2. The trigger that gives every new item its copies, from then on (old processes too).
3. The existing items get their copies in batches of `BATCH` rows, in id order, each batch its
   own short transaction: an operator deciding an item waits at most for one batch, and the
   effects are only read (their weakest lock, ACCESS SHARE). Items opened meanwhile already
   carry their copies; a batch skips rows that have them, so running it again is harmless.
4. Each new partial index is built with CREATE INDEX CONCURRENTLY, which lets reads and writes
   of the review items go on while it builds.
5. ANALYZE of the review items, so that the planner knows the new columns before autovacuum
   comes round, and picks their indexes (it reads a sample; SHARE UPDATE EXCLUSIVE, as 4).

Neither the effects nor the events table is locked beyond reading.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# Review items per UPDATE of the backfill.
BATCH = 5000


def copy_from_effects(apps, schema_editor) -> None:
    ReviewItem = apps.get_model("ledger", "ReviewItem")
    Effect = apps.get_model("ledger", "Effect")
    items, effects = ReviewItem._meta.db_table, Effect._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        after = 0
        while True:
            cursor.execute(
                f"SELECT max(id) FROM (SELECT id FROM {items} WHERE id > %s "
                "ORDER BY id LIMIT %s) batch",
                [after, BATCH],
            )
            (upto,) = cursor.fetchone()
            if upto is None:
                return
            cursor.execute(
                f"UPDATE {items} r SET tool = e.tool, agent_id = e.agent_id, run_id = e.run_id, "
                f"effect_created_at = e.created_at FROM {effects} e "
                "WHERE e.id = r.effect_id AND r.id > %s AND r.id <= %s AND r.tool IS NULL",
                [after, upto],
            )
            after = upto


# PostgreSQL writes the copies of every item inserted without them, whichever process inserts
# it: during a rolling deploy, a process that predates this migration still opens items, and
# they must not drop out of the queue's filters. The one statement that opens items
# (`ledger.reviewqueue`) leaves them to this trigger, so the rule is written once.
COPIES_TRIGGER = [
    """
CREATE FUNCTION ledger_review_item_copies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT e.tool, e.agent_id, e.run_id, e.created_at
      INTO NEW.tool, NEW.agent_id, NEW.run_id, NEW.effect_created_at
      FROM ledger_effect e WHERE e.id = NEW.effect_id;
    RETURN NEW;
END
$$
""",
    """
CREATE TRIGGER review_item_copies BEFORE INSERT ON reviews_reviewitem
FOR EACH ROW WHEN (NEW.tool IS NULL) EXECUTE FUNCTION ledger_review_item_copies()
""",
]
DROP_COPIES_TRIGGER = [
    "DROP TRIGGER review_item_copies ON reviews_reviewitem",
    "DROP FUNCTION ledger_review_item_copies()",
]


def open_items(name: str, *fields: str) -> AddIndexConcurrently:
    """A partial index over open items (`review_open_<name>_idx`), built concurrently."""
    return AddIndexConcurrently(
        model_name="reviewitem",
        index=models.Index(
            fields=list(fields),
            name=f"review_open_{name}_idx",
            condition=models.Q(resolved_at__isnull=True),
        ),
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0015_event_created_at_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="reviewitem",
            name="tool",
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AddField(
            model_name="reviewitem",
            name="agent",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=models.deletion.PROTECT,
                related_name="+",
                to="ledger.agent",
            ),
        ),
        migrations.AddField(
            model_name="reviewitem",
            name="run_id",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddField(
            model_name="reviewitem",
            name="effect_created_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(COPIES_TRIGGER, DROP_COPIES_TRIGGER),
        migrations.RunPython(copy_from_effects, migrations.RunPython.noop, elidable=True),
        open_items("tool", "tool", "opened_at"),
        open_items("reason", "reason", "opened_at"),
        open_items("agent", "agent", "opened_at"),
        open_items("run", "run_id", "opened_at"),
        open_items("effect_age", "effect_created_at"),
        migrations.RunSQL("ANALYZE reviews_reviewitem", migrations.RunSQL.noop, elidable=True),
    ]
