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

The compensations' SQL is loaded from its file; the halts' rule is the text this migration ran,
kept as a literal (`HALTS`) since 0032 changed the file. Every statement on the effects table
changes the catalogue only (a column with a constant default, a trigger), under a short
`lock_timeout`, as 0017's do: behind a long transaction it fails fast and is run again rather
than queueing every agent.
"""

import importlib

from django.db import migrations, models

from ledger.sql import statements

_OLD = importlib.import_module("ledger.migrations.0008_halts")
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"

# The halts' rule as this migration made it (`ledger/sql/halts.sql` before 0032).
HALTS = [
    """
CREATE OR REPLACE FUNCTION ledger_covering_halt(
    p_kind text, p_tool text, p_agent_id bigint, p_run_id text, p_requested_by text
) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT h.id FROM ledger_halt h
     WHERE h.lifted_at IS NULL
       AND p_kind <> 'decision'
       AND ((h.scope = 'tool' AND h.value = p_tool)
            OR ((p_kind = 'action'
                 OR h.include_compensations
                 OR p_requested_by IS DISTINCT FROM 'operator')
                AND (h.scope = 'all'
                     OR (h.scope = 'run' AND h.value = p_run_id)
                     OR (h.scope = 'agent'
                         AND h.value = (SELECT a.name FROM ledger_agent a
                                         WHERE a.id = p_agent_id)))))
     ORDER BY h.since, h.id
     LIMIT 1
$$;
""",
    """
CREATE OR REPLACE FUNCTION ledger_halt_for_claim(
    p_kind text, p_tool text, p_agent_id bigint, p_run_id text, p_requested_by text
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1751215220);
    RETURN ledger_covering_halt(p_kind, p_tool, p_agent_id, p_run_id, p_requested_by);
END
$$;
""",
    """
CREATE OR REPLACE FUNCTION ledger_effect_claim_halted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    halt_id bigint;
    halt record;
BEGIN
    halt_id := ledger_halt_for_claim(NEW.kind, NEW.tool, NEW.agent_id, NEW.run_id,
                                     NEW.requested_by);
    IF halt_id IS NOT NULL THEN
        SELECT * INTO halt FROM ledger_halt WHERE id = halt_id;
        RAISE EXCEPTION 'ledger_halted'
            USING ERRCODE = 'P0001',
                  DETAIL = json_build_object(
                      'id', halt.id, 'scope', halt.scope, 'value', halt.value,
                      'reason', halt.reason, 'by', halt.halted_by,
                      'since', to_char(halt.since AT TIME ZONE 'UTC',
                                       'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text;
    END IF;
    RETURN NEW;
END
$$;
""",
    "DROP TRIGGER IF EXISTS effect_claim_halted ON ledger_effect;",
    "CREATE TRIGGER effect_claim_halted BEFORE UPDATE OF status ON ledger_effect FOR EACH ROW WHEN (old.status::text = 'planned'::text AND new.status::text = 'dispatching'::text) EXECUTE FUNCTION ledger_effect_claim_halted();",
    "DROP TRIGGER IF EXISTS effect_claim_halted_insert ON ledger_effect;",
    "CREATE TRIGGER effect_claim_halted_insert BEFORE INSERT ON ledger_effect FOR EACH ROW WHEN (new.status::text = 'dispatching'::text) EXECUTE FUNCTION ledger_effect_claim_halted();",
]

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
        migrations.RunSQL(HALTS + DROP_OLD_HALTS, RESTORE_HALTS),
        migrations.RunSQL(statements("compensations"), DROP_COMPENSATION_CHECK),
    ]
