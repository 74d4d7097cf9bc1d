"""Agent notifications: callbacks and the long poll.

One trigger tells agents of every status change, whoever makes it (`ledger.transitions`, the
interlocks' cascade in raw SQL, an old process during a rolling deploy): it sends
`NOTIFY ledger_effects, '<effect id>'` (delivered at commit, so a waiter never sees a change
that rolls back) and, when the effect has a callback_url, inserts the callback into the alert
outbox in the same transaction, keyed "<effect id>:<version>" so that each change is sent once
(a status can come back: planned → dispatching → planned → dispatching).
"""

from django.db import migrations, models

# ledger.notifications.CHANNEL; the outbox row is what ledger.outbox.notify would insert.
STATUS_CHANGED = [
    """
CREATE FUNCTION ledger_effect_status_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ledger_effects', NEW.id::text);
    IF NEW.callback_url <> '' THEN
        INSERT INTO ledger_alert
               (id, kind, key, payload, created_at, attempts, delivered, last_error)
        VALUES (gen_random_uuid(), 'callback', NEW.id::text || ':' || NEW.version::text,
                jsonb_build_object(
                    'summary', NEW.effect_key || ': ' || OLD.status || ' -> ' || NEW.status,
                    'callback_url', NEW.callback_url, 'effect_id', NEW.id,
                    'effect_key', NEW.effect_key, 'run_id', NEW.run_id,
                    'step_id', NEW.step_id, 'tool', NEW.tool, 'from_status', OLD.status,
                    'status', NEW.status, 'version', NEW.version,
                    'changed_at', NEW.updated_at),
                -- the statement's own time: changes within one transaction keep their order
                clock_timestamp(), 0, '[]'::jsonb, '')
        ON CONFLICT (kind, key) DO NOTHING;
    END IF;
    RETURN NULL;
END
$$
""",
    """
CREATE TRIGGER effect_status_changed AFTER UPDATE OF status ON ledger_effect
FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION ledger_effect_status_changed()
""",
]

DROP_STATUS_CHANGED = [
    "DROP TRIGGER effect_status_changed ON ledger_effect",
    "DROP FUNCTION ledger_effect_status_changed()",
]


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0012_approvals"),
    ]

    operations = [
        migrations.AddField(
            model_name="effect",
            name="callback_url",
            field=models.CharField(blank=True, db_default="", max_length=2000),
        ),
        migrations.AlterField(
            model_name="alert",
            name="kind",
            field=models.CharField(
                choices=[
                    ("review_due_soon", "Review item 75% through its time"),
                    ("review_overdue", "Review item overdue"),
                    ("halt", "Halt"),
                    ("limit_exceeded", "Limit exceeded"),
                    ("callback", "Effect status changed (agent callback)"),
                ],
                max_length=32,
            ),
        ),
        migrations.RunSQL(STATUS_CHANGED, DROP_STATUS_CHANGED),
    ]
