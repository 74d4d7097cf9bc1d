"""Halts: the kill switch (ledger.halts, ledger.killswitch).

Besides the table, two SQL functions and a trigger, so that PostgreSQL itself refuses a claim
that an active halt covers, whichever process (an old one that knows no halts, raw SQL) makes it:

- `ledger_covering_halt(kind, tool, agent_id, run_id)`: the one coverage rule, the id of the
  oldest active halt covering such an effect, or NULL. Tool halts stop everything of their tool;
  agent, run and `all` halts stop actions, and compensations only with include_compensations.
- `ledger_halt_for_claim(…)`: the same after taking the halts' advisory lock SHARED. `halt()`
  takes it EXCLUSIVELY before inserting, so it waits for every claim that has passed this check
  and not yet committed, and a claim arriving meanwhile waits for the halt and then sees it: once
  `halt()` has returned, no later claim commits. Claims share the lock, so they never wait for
  each other. The check runs as its own statement after the lock is granted: under READ COMMITTED
  it takes a fresh snapshot, which includes a halt committed while the claim waited.
- the trigger `effect_claim_halted` on `planned → dispatching`, which raises `ledger_halted`
  (SQLSTATE P0001) with the halt as JSON in DETAIL; the API answers 409 `halted` with it.

The reserved agent `system`, under which halts and resumes are recorded as decisions, is
created here; `ledger.agentkeys.issue_key` refuses to issue it a key.
"""

import django.db.models.functions.datetime
from django.db import migrations, models

# The advisory lock's key, 1751215220, is "halt" in ASCII: ledger.halts.HALT_LOCK.
COVERING_HALT = [
    """
CREATE FUNCTION ledger_covering_halt(p_kind text, p_tool text, p_agent_id bigint, p_run_id text)
RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT h.id FROM ledger_halt h
     WHERE h.lifted_at IS NULL
       AND p_kind <> 'decision'
       AND ((h.scope = 'tool' AND h.value = p_tool)
            OR ((p_kind = 'action' OR h.include_compensations)
                AND (h.scope = 'all'
                     OR (h.scope = 'run' AND h.value = p_run_id)
                     OR (h.scope = 'agent'
                         AND h.value = (SELECT a.name FROM ledger_agent a
                                         WHERE a.id = p_agent_id)))))
     ORDER BY h.since, h.id
     LIMIT 1
$$
""",
    """
CREATE FUNCTION ledger_halt_for_claim(p_kind text, p_tool text, p_agent_id bigint, p_run_id text)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1751215220);  -- HALT_LOCK
    -- A statement of its own, after the lock: a fresh snapshot (see the migration's docstring).
    RETURN ledger_covering_halt(p_kind, p_tool, p_agent_id, p_run_id);
END
$$
""",
    """
CREATE FUNCTION ledger_effect_claim_halted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    halt_id bigint;
    halt record;
BEGIN
    halt_id := ledger_halt_for_claim(NEW.kind, NEW.tool, NEW.agent_id, NEW.run_id);
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
$$
""",
    """
CREATE TRIGGER effect_claim_halted BEFORE UPDATE OF status ON ledger_effect
FOR EACH ROW WHEN (OLD.status = 'planned' AND NEW.status = 'dispatching')
EXECUTE FUNCTION ledger_effect_claim_halted()
""",
]

DROP_COVERING_HALT = [
    "DROP TRIGGER effect_claim_halted ON ledger_effect",
    "DROP FUNCTION ledger_effect_claim_halted()",
    "DROP FUNCTION ledger_halt_for_claim(text, text, bigint, text)",
    "DROP FUNCTION ledger_covering_halt(text, text, bigint, text)",
]


def create_system_agent(apps, schema_editor):
    apps.get_model("ledger", "Agent").objects.get_or_create(name="system")


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0007_config_version"),
    ]

    operations = [
        migrations.CreateModel(
            name="Halt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "scope",
                    models.CharField(
                        choices=[
                            ("tool", "Tool"),
                            ("agent", "Agent"),
                            ("run", "Run"),
                            ("all", "All"),
                        ],
                        max_length=8,
                    ),
                ),
                ("value", models.CharField(blank=True, max_length=200)),
                ("reason", models.CharField(max_length=2000)),
                ("halted_by", models.CharField(max_length=200)),
                (
                    "since",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("include_compensations", models.BooleanField(default=False)),
                ("lifted_at", models.DateTimeField(blank=True, null=True)),
                ("lifted_by", models.CharField(blank=True, max_length=200)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("lifted_at__isnull", True)),
                        fields=("scope", "value"),
                        name="halt_active_uniq",
                    )
                ],
            },
        ),
        migrations.RunSQL(COVERING_HALT, DROP_COVERING_HALT),
        migrations.RunPython(create_system_agent, migrations.RunPython.noop),
    ]
