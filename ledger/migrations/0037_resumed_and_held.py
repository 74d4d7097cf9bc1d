"""One word per idea in the columns: a halt is resumed, and a review item is held.

- `Halt.lifted_at` and `lifted_by` become `resumed_at` and `resumed_by` (halts are halted and
  resumed, the pages' and the commands' words). PostgreSQL renames the columns in the partial
  unique indexes' conditions itself; only the migration state's copy of those conditions is
  rewritten.
- `ReviewItem.claimed_at` becomes `held_at`: since when the assignee holds the item (a claim is
  an agent's, of an effect; an operator holds a review item).
- The halts' coverage rule reads the renamed column (`ledger/sql/halts.sql`, loaded here; 0032
  keeps the text it ran as a literal). A SQL function's body is checked when it is created, so
  going back puts 0032's text back only once the column has its old name again: the first
  RunSQL below does nothing forwards and is the last step backwards.

Nothing recorded changes: a decision keeps its `over_claim` flag as recorded (see
`reviews.decisions.decide`), and no API field, export column or witness key named these
columns. The renames and the claim triggers re-created on the effects table change the
catalogue only, under a short `lock_timeout`, as 0032's do.
"""

import importlib

from django.db import migrations, models

from ledger.sql import statements

_BEFORE = importlib.import_module("ledger.migrations.0032_halt_teams")
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"


def _bare(statement: str) -> str:
    """The statement without the comment lines before it: each then starts with its verb, which
    is how tests/test_migration_locks.py tells a catalogue-only DROP or CREATE TRIGGER."""
    lines = statement.splitlines()
    while lines and lines[0].lstrip().startswith("--"):
        lines.pop(0)
    return "\n".join(lines)


def _active(teams: bool) -> models.Q:
    return models.Q(("resumed_at__isnull", True), ("teams__isnull", not teams))


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0036_tool_statement_format"),
    ]

    operations = [
        # Forwards the timeout precedes the renames; backwards (operations run in reverse) the
        # last RunSQL sets it before them.
        migrations.RunSQL(LOCK_TIMEOUT, migrations.RunSQL.noop),
        migrations.RunSQL(migrations.RunSQL.noop, _BEFORE.HALTS),
        migrations.RenameField(model_name="halt", old_name="lifted_at", new_name="resumed_at"),
        migrations.RenameField(model_name="halt", old_name="lifted_by", new_name="resumed_by"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="halt", name="halt_active_uniq"),
                migrations.RemoveConstraint(model_name="halt", name="halt_active_teams_uniq"),
                migrations.AddConstraint(
                    model_name="halt",
                    constraint=models.UniqueConstraint(
                        condition=_active(teams=False),
                        fields=("scope", "value"),
                        name="halt_active_uniq",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="halt",
                    constraint=models.UniqueConstraint(
                        condition=_active(teams=True),
                        fields=("scope", "value", "teams"),
                        name="halt_active_teams_uniq",
                    ),
                ),
            ],
        ),
        migrations.RenameField(model_name="reviewitem", old_name="claimed_at", new_name="held_at"),
        migrations.RunSQL([_bare(s) for s in statements("halts")], migrations.RunSQL.noop),
        migrations.RunSQL(migrations.RunSQL.noop, LOCK_TIMEOUT),
    ]
