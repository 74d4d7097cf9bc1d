-- Limits (`ledger.rules.limits`), enforced on every claim as halts are: a process that
-- knows nothing of limits (an old one during a rolling deploy, raw SQL) cannot claim past one.
--
-- * ledger_currency_exponent(code): ISO 4217 minor-unit exponents, 2 unless listed; a copy of
--   `ledger.rules.limits.EXPONENTS` (tests/test_limits_trigger.py checks they agree).
-- * ledger_to_minor(amount, code): an exact amount as integer minor units, or NULL when it is
--   not a non-negative number with at most the currency's decimal places.
-- * ledger_count_claim(scope, shown, max): claims per calendar minute. A counter row per
--   (scope, minute), created by INSERT … ON CONFLICT DO NOTHING and raised by a conditional
--   UPDATE: concurrent claims under one limit queue on the row's lock, and PostgreSQL checks
--   `used + 1 <= max` again against the row as the previous holder committed it.
-- * ledger_charge_amount(effect, scope, shown, limits, code, minor, listed_only): amount per
--   rolling 24 h. The (scope, currency) counter row is locked first; the sum that follows is a
--   statement of its own in a VOLATILE function, so under READ COMMITTED it sees every charge
--   the previous holder committed. An effect counts once per limit (its charge row); a proof
--   of non-receipt deletes the row.
-- * ledger_effect_claim_limits(): the trigger's function. The tool's limits before the
--   agent's, minute before amount, so two claims never take the same locks in opposite orders.
--
-- A refusal raises `ledger_limit_exceeded` (SQLSTATE P0001) with the limit as JSON in DETAIL
-- (which, current, max, retry_after, window, currency); the statement and every count it took
-- roll back with it. The triggers fire on `planned → dispatching` and on an effect inserted
-- already dispatching; by name, after the halts' (`effect_claim_halted` < `effect_claim_limits`).

CREATE OR REPLACE FUNCTION ledger_currency_exponent(p_code text)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
AS $$ SELECT CASE p_code WHEN 'BHD' THEN 3 WHEN 'BIF' THEN 0 WHEN 'CLF' THEN 4 WHEN 'CLP' THEN 0 WHEN 'DJF' THEN 0 WHEN 'GNF' THEN 0 WHEN 'IQD' THEN 3 WHEN 'ISK' THEN 0 WHEN 'JOD' THEN 3 WHEN 'JPY' THEN 0 WHEN 'KMF' THEN 0 WHEN 'KRW' THEN 0 WHEN 'KWD' THEN 3 WHEN 'LYD' THEN 3 WHEN 'OMR' THEN 3 WHEN 'PYG' THEN 0 WHEN 'RWF' THEN 0 WHEN 'TND' THEN 3 WHEN 'UGX' THEN 0 WHEN 'UYI' THEN 0 WHEN 'UYW' THEN 4 WHEN 'VND' THEN 0 WHEN 'VUV' THEN 0 WHEN 'XAF' THEN 0 WHEN 'XOF' THEN 0 WHEN 'XPF' THEN 0 ELSE 2 END $$;

CREATE OR REPLACE FUNCTION ledger_to_minor(p_amount text, p_code text)
 RETURNS bigint
 LANGUAGE plpgsql
 IMMUTABLE
AS $$
DECLARE
    v numeric;
BEGIN
    IF p_amount IS NULL OR p_code IS NULL OR length(p_amount) > 64 THEN
        RETURN NULL;
    END IF;
    v := p_amount::numeric * power(10::numeric, ledger_currency_exponent(p_code));
    IF v < 0 OR v <> trunc(v) OR v > 9000000000000000000 THEN
        RETURN NULL;
    END IF;
    RETURN v::bigint;
EXCEPTION WHEN data_exception THEN
    RETURN NULL;  -- not a number
END
$$;

CREATE OR REPLACE FUNCTION ledger_count_claim(p_scope text, p_shown text, p_max integer)
 RETURNS void
 LANGUAGE plpgsql
AS $$
DECLARE
    minute text := to_char(date_trunc('minute', now() AT TIME ZONE 'UTC'),
                           'YYYY-MM-DD"T"HH24:MI"Z"');
    n bigint;
BEGIN
    INSERT INTO ledger_limitcounter (scope, period, currency, used)
    VALUES (p_scope, minute, '', 0)
    ON CONFLICT (scope, period, currency) DO NOTHING;
    UPDATE ledger_limitcounter SET used = used + 1
     WHERE scope = p_scope AND period = minute AND currency = '' AND used + 1 <= p_max
    RETURNING used INTO n;
    IF n IS NULL THEN
        SELECT used INTO n FROM ledger_limitcounter
         WHERE scope = p_scope AND period = minute AND currency = '';
        RAISE EXCEPTION 'ledger_limit_exceeded'
            USING ERRCODE = 'P0001',
                  DETAIL = json_build_object(
                      'which', p_shown || ':claims_per_minute', 'current', n, 'max', p_max,
                      'retry_after', 60 - floor(extract(second FROM now()))::int,
                      'window', minute, 'currency', '')::text;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION ledger_charge_amount(p_effect uuid, p_scope text, p_shown text, p_limits jsonb, p_code text, p_minor bigint, p_listed_only boolean)
 RETURNS void
 LANGUAGE plpgsql
AS $$
DECLARE
    maximum bigint;
    used bigint;
    remaining bigint;
    retry int := 86400;
    charge record;
BEGIN
    SELECT ledger_to_minor(value, p_code) INTO maximum
      FROM jsonb_each_text(p_limits) WHERE upper(key) = p_code;
    IF maximum IS NULL AND NOT p_listed_only AND p_code IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM jsonb_each_text(p_limits) WHERE upper(key) = p_code) THEN
        RETURN;  -- this scope caps other currencies only
    END IF;
    PERFORM 1 FROM ledger_amountcharge WHERE effect_id = p_effect AND scope = p_scope;
    IF FOUND THEN
        RETURN;  -- counted once per effect: a re-claim adds nothing
    END IF;
    IF maximum IS NOT NULL AND p_minor IS NOT NULL THEN
        INSERT INTO ledger_limitcounter (scope, period, currency, used)
        VALUES (p_scope, '24h', p_code, 0)
        ON CONFLICT (scope, period, currency) DO NOTHING;
        PERFORM 1 FROM ledger_limitcounter
         WHERE scope = p_scope AND period = '24h' AND currency = p_code FOR UPDATE;
        -- A statement of its own, after the lock: a fresh snapshot.
        SELECT coalesce(sum(amount_minor), 0) INTO used FROM ledger_amountcharge
         WHERE scope = p_scope AND currency = p_code
           AND charged_at > now() - interval '24 hours';
        IF used + p_minor <= maximum THEN
            INSERT INTO ledger_amountcharge (effect_id, scope, currency, amount_minor, charged_at)
            VALUES (p_effect, p_scope, p_code, p_minor, now())
            ON CONFLICT (effect_id, scope) DO NOTHING;
            RETURN;
        END IF;
        -- When enough of the oldest charges leave the window for this amount to fit.
        remaining := used;
        IF p_minor <= maximum THEN
            FOR charge IN
                SELECT amount_minor,
                       extract(epoch FROM charged_at + interval '24 hours' - now()) AS left_in
                  FROM ledger_amountcharge
                 WHERE scope = p_scope AND currency = p_code
                   AND charged_at > now() - interval '24 hours'
                 ORDER BY charged_at
            LOOP
                remaining := remaining - charge.amount_minor;
                IF remaining + p_minor <= maximum THEN
                    retry := greatest(1, ceil(charge.left_in)::int);
                    EXIT;
                END IF;
            END LOOP;
        END IF;
    ELSE
        -- The amount cannot be read, or a tool's limit does not list this currency: refused
        -- (the API answers 422 before this; only a process that skipped it gets here).
        SELECT coalesce(sum(amount_minor), 0) INTO used FROM ledger_amountcharge
         WHERE scope = p_scope AND currency = coalesce(p_code, '')
           AND charged_at > now() - interval '24 hours';
    END IF;
    RAISE EXCEPTION 'ledger_limit_exceeded'
        USING ERRCODE = 'P0001',
              DETAIL = json_build_object(
                  'which', p_shown || ':amount_per_day:' || coalesce(p_code, '?'),
                  'current', used, 'max', coalesce(maximum, 0), 'retry_after', retry,
                  'window', to_char(date_trunc('hour', now() AT TIME ZONE 'UTC'),
                                    'YYYY-MM-DD"T"HH24"Z"'),
                  'currency', coalesce(p_code, ''))::text;
END
$$;

CREATE OR REPLACE FUNCTION ledger_effect_claim_limits()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
DECLARE
    tool record;
    agent record;
    code text;
    minor bigint;
    priced boolean;
BEGIN
    SELECT limit_claims_per_minute, limit_amount_per_day, amount_path, currency_path
      INTO tool FROM ledger_tool WHERE name = NEW.tool;
    SELECT name, limit_claims_per_minute, limit_amount_per_day
      INTO agent FROM ledger_agent WHERE id = NEW.agent_id;
    priced := coalesce(tool.amount_path, '') <> '' AND coalesce(tool.currency_path, '') <> '';
    IF priced THEN
        code := upper(NEW.request #>> string_to_array(tool.currency_path, '.'));
        minor := ledger_to_minor(NEW.request #>> string_to_array(tool.amount_path, '.'), code);
    END IF;
    IF tool.limit_claims_per_minute IS NOT NULL THEN
        PERFORM ledger_count_claim('tool:' || NEW.tool, 'tool:' || NEW.tool,
                                   tool.limit_claims_per_minute);
    END IF;
    IF priced AND coalesce(tool.limit_amount_per_day, '{}'::jsonb) <> '{}'::jsonb THEN
        PERFORM ledger_charge_amount(NEW.id, 'tool:' || NEW.tool, 'tool:' || NEW.tool,
                                     tool.limit_amount_per_day, code, minor, true);
    END IF;
    IF agent.limit_claims_per_minute IS NOT NULL THEN
        PERFORM ledger_count_claim('agent:' || NEW.agent_id, 'agent:' || agent.name,
                                   agent.limit_claims_per_minute);
    END IF;
    IF priced AND coalesce(agent.limit_amount_per_day, '{}'::jsonb) <> '{}'::jsonb THEN
        PERFORM ledger_charge_amount(NEW.id, 'agent:' || NEW.agent_id, 'agent:' || agent.name,
                                     agent.limit_amount_per_day, code, minor, false);
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS effect_claim_limits ON ledger_effect;

CREATE TRIGGER effect_claim_limits BEFORE UPDATE OF status ON ledger_effect FOR EACH ROW WHEN (old.status::text = 'planned'::text AND new.status::text = 'dispatching'::text) EXECUTE FUNCTION ledger_effect_claim_limits();

DROP TRIGGER IF EXISTS effect_claim_limits_insert ON ledger_effect;

CREATE TRIGGER effect_claim_limits_insert BEFORE INSERT ON ledger_effect FOR EACH ROW WHEN (new.status::text = 'dispatching'::text) EXECUTE FUNCTION ledger_effect_claim_limits();
