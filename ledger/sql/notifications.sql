-- Telling agents of every status change, whoever makes it (`ledger.effects.transitions`, the
-- interlocks' cascade in raw SQL, an old process during a rolling deploy;
-- `ledger.api.notifications`): `NOTIFY ledger_effects, '<effect id>'`, delivered at commit so a
-- long poll never sees a change that rolls back, and, for an effect with a callback_url, the
-- callback inserted into the alert outbox in the same transaction, keyed "<effect id>:<version>"
-- so that each change is sent once (a status can come back: planned → dispatching → planned).

CREATE OR REPLACE FUNCTION ledger_effect_status_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
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
$$;

DROP TRIGGER IF EXISTS effect_status_changed ON ledger_effect;

CREATE TRIGGER effect_status_changed AFTER UPDATE OF status ON ledger_effect FOR EACH ROW WHEN (old.status::text IS DISTINCT FROM new.status::text) EXECUTE FUNCTION ledger_effect_status_changed();
