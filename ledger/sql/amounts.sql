-- An effect's amount in minor units and its currency, read once, as it is written, whichever
-- process or statement inserts it: they stay when retention redacts the request, so that a
-- later statement still matches (`ledger.statements`).
--
-- * ledger_request_amount(request, tool): the request's amount at the tool's amount_path /
--   currency_path, in its amount_unit (`major`: "12.50" EUR is 1250; `minor`: 1250 is 1250).
--   NULLs where the tool declares no amount or the request's is unreadable: an intent is
--   refused earlier where it matters.
-- * effect_amount (BEFORE INSERT) writes them on every new effect.

CREATE OR REPLACE FUNCTION ledger_request_amount(p_request jsonb, p_tool text, OUT minor bigint, OUT code text)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
AS $$
DECLARE
    tool record;
    raw text;
BEGIN
    SELECT amount_path, currency_path, amount_unit INTO tool
      FROM ledger_tool WHERE name = p_tool;
    IF coalesce(tool.amount_path, '') = '' OR coalesce(tool.currency_path, '') = ''
       OR jsonb_typeof(p_request) <> 'object' THEN
        RETURN;
    END IF;
    code := upper(p_request #>> string_to_array(tool.currency_path, '.'));
    IF code IS NULL OR code !~ '^[A-Z]{3}$' THEN
        code := NULL;
        RETURN;
    END IF;
    raw := p_request #>> string_to_array(tool.amount_path, '.');
    IF tool.amount_unit = 'minor' THEN
        IF raw ~ '^[0-9]{1,18}$' THEN
            minor := raw::bigint;
        END IF;
    ELSE
        minor := ledger_to_minor(raw, code);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION ledger_effect_amount()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
DECLARE
    found record;
BEGIN
    found := ledger_request_amount(NEW.request::jsonb, NEW.tool);
    NEW.amount_minor := found.minor;
    NEW.currency := coalesce(found.code, '');
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS effect_amount ON ledger_effect;

CREATE TRIGGER effect_amount BEFORE INSERT ON ledger_effect FOR EACH ROW EXECUTE FUNCTION ledger_effect_amount();
