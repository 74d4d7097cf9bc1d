"""Who asked for each effect, and the rules that read it (issue: a halted agent kept getting
leases through compensations).

- `Effect.requested_by` (`agent` | `operator`), backfilled: a compensation whose intent was
  recorded by someone other than an agent was decided by an operator.
- `Tool.compensations_per_parent` (1): how many compensations an agent may record against one
  parent with this tool.
- The halts' coverage rule takes `requested_by`: agent, run and `all` halts exempt only the
  compensations an operator decided (`ledger/sql/halts.sql`, replacing 0008's functions).
- A trigger on inserts of an agent's compensation: own parent, the declared tool, at most
  compensations_per_parent (`ledger/sql/compensations.sql`).

The SQL is loaded from those files; a later change to either rule gives this migration the
text it ran as a literal. Every statement on the effects table changes the catalogue only (a
column with a constant default, a trigger), under a short `lock_timeout`, as 0017's do: behind
a long transaction it fails fast and is run again rather than queueing every agent.
"""

import importlib

from django.db import migrations, models

from ledger.sql import statements

_OLD = importlib.import_module("ledger.migrations.0008_halts")
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"

BACKFILL = """
UPDATE ledger_effect e SET requested_by = 'operator'
 WHERE e.kind = 'compensation'
   AND EXISTS (SELECT 1 FROM ledger_effectevent v
                WHERE v.effect_id = e.id AND v.kind = 'intent' AND v.actor NOT LIKE 'agent:%')
"""

# Back to 0008's functions: its text, the trigger function replaced in place.
RESTORE_HALTS = [
    _OLD.COVERING_HALT[0],
    _OLD.COVERING_HALT[1],
    _OLD.COVERING_HALT[2].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1),
    "DROP FUNCTION ledger_halt_for_claim(text, text, bigint, text, text)",
    "DROP FUNCTION ledger_covering_halt(text, text, bigint, text, text)",
]
DROP_OLD_HALTS = [
    "DROP FUNCTION ledger_halt_for_claim(text, text, bigint, text)",
    "DROP FUNCTION ledger_covering_halt(text, text, bigint, text)",
]
DROP_COMPENSATION_CHECK = [
    "DROP TRIGGER effect_agent_compensation ON ledger_effect",
    "DROP FUNCTION ledger_agent_compensation_check()",
]


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0024_search_indexes"),
    ]

    operations = [
        migrations.RunSQL(LOCK_TIMEOUT, LOCK_TIMEOUT),
        migrations.AddField(
            model_name="effect",
            name="requested_by",
            field=models.CharField(
                choices=[("agent", "Agent"), ("operator", "Operator")],
                db_default="agent",
                default="agent",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="tool",
            name="compensations_per_parent",
            field=models.PositiveSmallIntegerField(db_default=1, default=1),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.RunSQL(statements("halts") + DROP_OLD_HALTS, RESTORE_HALTS),
        migrations.RunSQL(statements("compensations"), DROP_COMPENSATION_CHECK),
    ]
