"""Keys and modes: agent and tool modes, key expiry (rotation) and last use.

The configuration-version triggers are replaced: the API key trigger now fires only for the
columns authentication reads, so that stamping `last_used_at` (at most once a minute per key)
does not empty every process's caches; the agent trigger also fires on a change of mode, since
a key is refused once its mode no longer matches its agent's. Existing agents and tools are
`live` (the column default), and so are existing keys (`elk_<prefix>_…`).
"""

import pgtrigger.compiler
import pgtrigger.migrations
from django.db import migrations, models

_BUMP = (
    "INSERT INTO ledger_configversion (id, version, changed_at) VALUES (1, "
    "nextval('ledger_configversion_seq'), now()) ON CONFLICT (id) DO UPDATE SET "
    "version = EXCLUDED.version, changed_at = EXCLUDED.changed_at; RETURN NULL;"
)
_MODES = [("test", "test"), ("live", "live")]


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0009_alerts"),
    ]

    operations = [
        pgtrigger.migrations.RemoveTrigger(
            model_name="agent",
            name="agent_active_bumps_config",
        ),
        pgtrigger.migrations.RemoveTrigger(
            model_name="apikey",
            name="apikey_bumps_config",
        ),
        migrations.AddField(
            model_name="agent",
            name="mode",
            field=models.CharField(choices=_MODES, db_default="live", default="live", max_length=4),
        ),
        migrations.AddField(
            model_name="apikey",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apikey",
            name="last_used_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="tool",
            name="mode",
            field=models.CharField(choices=_MODES, db_default="live", default="live", max_length=4),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="agent",
            trigger=pgtrigger.compiler.Trigger(
                name="agent_active_bumps_config",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    condition='WHEN (OLD."is_active" IS DISTINCT FROM (NEW."is_active") '
                    'OR OLD."mode" IS DISTINCT FROM (NEW."mode"))',
                    func=_BUMP,
                    hash="a923d4d410b3ce6c6cd1c5b090e7781aba6bd78b",
                    operation='UPDATE OF "is_active", "mode"',
                    pgid="pgtrigger_agent_active_bumps_config_e3049",
                    table="ledger_agent",
                    when="AFTER",
                ),
            ),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="apikey",
            trigger=pgtrigger.compiler.Trigger(
                name="apikey_bumps_config",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func=_BUMP,
                    hash="a668ae61e4a2167334643455558e7ae9162a7bbe",
                    level="STATEMENT",
                    operation='INSERT OR UPDATE OF "agent_id", "prefix", "digest", '
                    '"revoked_at", "expires_at" OR DELETE OR TRUNCATE',
                    pgid="pgtrigger_apikey_bumps_config_cf486",
                    table="ledger_apikey",
                    when="AFTER",
                ),
            ),
        ),
    ]
