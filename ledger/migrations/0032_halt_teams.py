"""A run halt made by a person scoped to teams covers only that run's agents of their teams and
agents of no team (issue 34, L3: an operator's run halt refused another team's agent in the same
run id).

- `Halt.teams`: the ids of the teams a run halt is narrowed to; NULL for every agent (an admin's,
  the shell's, the ledger's own). Only run halts may have them (`halt_teams_run_only`).
- One active halt per subject becomes one per (subject, teams): an admin's run halt and a team's
  of the same run id are two rows, each with its own partial unique index.
- The coverage rule reads `teams` (`ledger/sql/halts.sql`, loaded here; 0025 keeps the text it
  ran as a literal, which going back restores).

The halts table is small and no agent writes it; re-creating the claim triggers on the effects
table changes the catalogue only, under a short `lock_timeout`, as 0025's do.
"""

import importlib

import django.contrib.postgres.fields
from django.db import migrations, models

from ledger.sql import statements

_BEFORE = importlib.import_module("ledger.migrations.0025_requested_by")
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"


def _bare(statement: str) -> str:
    """The statement without the comment lines before it: each then starts with its verb, which
    is how tests/test_migration_locks.py tells a catalogue-only DROP or CREATE TRIGGER."""
    lines = statement.splitlines()
    while lines and lines[0].lstrip().startswith("--"):
        lines.pop(0)
    return "\n".join(lines)


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0031_archived_months"),
    ]

    operations = [
        migrations.RunSQL(LOCK_TIMEOUT, LOCK_TIMEOUT),
        migrations.AddField(
            model_name="halt",
            name="teams",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.BigIntegerField(), blank=True, null=True, size=None
            ),
        ),
        migrations.RemoveConstraint(model_name="halt", name="halt_active_uniq"),
        migrations.AddConstraint(
            model_name="halt",
            constraint=models.UniqueConstraint(
                condition=models.Q(("lifted_at__isnull", True), ("teams__isnull", True)),
                fields=("scope", "value"),
                name="halt_active_uniq",
            ),
        ),
        migrations.AddConstraint(
            model_name="halt",
            constraint=models.UniqueConstraint(
                condition=models.Q(("lifted_at__isnull", True), ("teams__isnull", False)),
                fields=("scope", "value", "teams"),
                name="halt_active_teams_uniq",
            ),
        ),
        migrations.AddConstraint(
            model_name="halt",
            constraint=models.CheckConstraint(
                condition=models.Q(("teams__isnull", True), ("scope", "run"), _connector="OR"),
                name="halt_teams_run_only",
            ),
        ),
        migrations.RunSQL([_bare(s) for s in statements("halts")], _BEFORE.HALTS),
    ]
