"""A run halt made by a person scoped to teams covers only that run's agents of their teams and
agents of no team (issue 34, L3: an operator's run halt refused another team's agent in the same
run id).

- `Halt.teams`: the ids of the teams a run halt is narrowed to; NULL for every agent (an admin's,
  the shell's, the ledger's own). Only run halts may have them (`halt_teams_run_only`).
- One active halt per subject becomes one per (subject, teams): an admin's run halt and a team's
  of the same run id are two rows, each with its own partial unique index.
- The coverage rule reads `teams` (`ledger/sql/halts.sql` as it was then, kept here as a literal
  (`HALTS`) since 0037 changed the file; 0025 keeps the text it ran as a literal too, which going
  back restores).

The halts table is small and no agent writes it; re-creating the claim triggers on the effects
table changes the catalogue only, under a short `lock_timeout`, as 0025's do.
"""

import importlib

import django.contrib.postgres.fields
from django.db import migrations, models

_BEFORE = importlib.import_module("ledger.migrations.0025_requested_by")
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"

# The halts' rule as this migration made it (`ledger/sql/halts.sql` before 0037), without the
# comment lines: each statement starts with its verb, which is how
# tests/test_migration_locks.py tells a catalogue-only DROP or CREATE TRIGGER.
HALTS = [
    """CREATE OR REPLACE FUNCTION ledger_covering_halt(
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
                     OR (h.scope = 'run' AND h.value = p_run_id
                         AND (h.teams IS NULL
                              OR COALESCE((SELECT a.team_id = ANY(h.teams)
                                             FROM ledger_agent a WHERE a.id = p_agent_id),
                                          true)))
                     OR (h.scope = 'agent'
                         AND h.value = (SELECT a.name FROM ledger_agent a
                                         WHERE a.id = p_agent_id)))))
     ORDER BY h.since, h.id
     LIMIT 1
$$;
""",
    """CREATE OR REPLACE FUNCTION ledger_halt_for_claim(
    p_kind text, p_tool text, p_agent_id bigint, p_run_id text, p_requested_by text
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1751215220);
    RETURN ledger_covering_halt(p_kind, p_tool, p_agent_id, p_run_id, p_requested_by);
END
$$;
""",
    """CREATE OR REPLACE FUNCTION ledger_effect_claim_halted() RETURNS trigger LANGUAGE plpgsql AS $$
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
        migrations.RunSQL(HALTS, _BEFORE.HALTS),
    ]
