"""Retention: the events' append-only trigger lets retention redact an event's data.

The one change the trigger now permits: `data` becomes {"redacted": true}, every other column
(the digest included) as it was, once a `retention_purge` event of the same effect was
appended after the event (`ledger.retention` appends it first, in the same transaction).

Written to run while the ledger serves traffic. The trigger keeps its name, timing and
operations; only its function's body changes. So instead of pgtrigger's own operations
(RemoveTrigger and AddTrigger drop and create the trigger in one multi-statement string,
ACCESS EXCLUSIVE on the events table), the database side replaces the function, which locks
no table, and puts the new definition's hash in the trigger's comment as pgtrigger's install
would, so that `manage.py pgtrigger ls` reports it installed (the comment takes ACCESS SHARE
on the table). The state side is what `makemigrations` generates. A short lock_timeout all
the same, as in 0017: should either statement ever wait, it fails fast and can be rerun.
"""

import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations

LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"
PGID = "pgtrigger_event_append_only_05827"
TABLE = "ledger_effectevent"
PURGE = "retention_purge"

REFUSE = "RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;"
# As the model declares it (EffectEvent.Meta.triggers), rendered.
REDACTION_ONLY = (
    "IF TG_OP = 'UPDATE' AND NEW.data = jsonb_build_object('redacted', true) "
    "AND to_jsonb(NEW) - 'data' = to_jsonb(OLD) - 'data' "
    f"AND OLD.kind <> '{PURGE}' "
    f"AND EXISTS (SELECT 1 FROM {TABLE} p WHERE p.effect_id = OLD.effect_id "
    f"AND p.kind = '{PURGE}' AND p.id > OLD.id) "
    f"THEN RETURN NEW; END IF; {REFUSE}"
)
# What pgtrigger computed for each definition (the hash it writes in the trigger's comment).
REDACTION_ONLY_HASH = "e7b6f67400af661819787355e55c1872f1b7b6e7"
# 0001's pgtrigger.Protect refused every change.
PROTECT_HASH = "adf11137c87784460edebea7a6108704b1d68639"


def _function(body: str) -> str:
    """The trigger function as pgtrigger's install template writes it: a session that sets
    `pgtrigger.ignore` to the trigger's name skips it."""
    return f"""
CREATE OR REPLACE FUNCTION {PGID}() RETURNS TRIGGER AS $$
BEGIN
    IF ("public"._pgtrigger_should_ignore(TG_NAME) IS TRUE) THEN
        IF (TG_OP = 'DELETE') THEN
            RETURN OLD;
        ELSE
            RETURN NEW;
        END IF;
    END IF;
    {body}
END;
$$ LANGUAGE plpgsql
"""


def _comment(hash_: str) -> str:
    return f"COMMENT ON TRIGGER {PGID} ON {TABLE} IS '{hash_}'"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0019_statements"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    [LOCK_TIMEOUT, _function(REDACTION_ONLY), _comment(REDACTION_ONLY_HASH)],
                    [LOCK_TIMEOUT, _function(REFUSE), _comment(PROTECT_HASH)],
                ),
            ],
            state_operations=[
                pgtrigger.migrations.RemoveTrigger(
                    model_name="effectevent",
                    name="event_append_only",
                ),
                pgtrigger.migrations.AddTrigger(
                    model_name="effectevent",
                    trigger=pgtrigger.compiler.Trigger(
                        name="event_append_only",
                        sql=pgtrigger.compiler.UpsertTriggerSql(
                            func=REDACTION_ONLY,
                            hash=REDACTION_ONLY_HASH,
                            operation="UPDATE OR DELETE",
                            pgid=PGID,
                            table=TABLE,
                            when="BEFORE",
                        ),
                    ),
                ),
            ],
        ),
    ]
