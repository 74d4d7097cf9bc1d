-- Effect counts (`ledger.observability.effectcounts`): effects by (agent, kind, tool, status),
-- kept as effects are written, whoever writes, so that neither /metrics nor the overview ever
-- groups the effects table.
--
-- * ledger_effect_count_change(): the row triggers' function. An effect inserted, deleted, or
--   moved to another agent, kind, tool or status appends its -1 (the old key) and +1 (the new)
--   to ledger_effectcountdelta, in the transaction that makes the change: counts plus deltas,
--   read in one snapshot, are exactly the effects that snapshot sees. It only appends: no
--   shared row is updated, so writers never wait for each other and cannot deadlock on it.
-- * ledger_fold_effect_counts(): moves every delta it can see into ledger_effectcount (one row
--   per key, in key order) and answers how many it moved. One fold at a time: a second caller
--   returns 0 at once (a transaction-scoped advisory lock) and readers add the deltas anyway.
--
-- The triggers fire AFTER the row is written, so a refused write (the FSM, halts, limits)
-- appends nothing.

CREATE OR REPLACE FUNCTION ledger_effect_count_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO ledger_effectcountdelta (agent_id, kind, tool, status, n)
        VALUES (OLD.agent_id, OLD.kind, OLD.tool, OLD.status, -1);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO ledger_effectcountdelta (agent_id, kind, tool, status, n)
        VALUES (NEW.agent_id, NEW.kind, NEW.tool, NEW.status, 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION ledger_fold_effect_counts()
 RETURNS bigint
 LANGUAGE plpgsql
AS $$
DECLARE
    moved bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('ledger_fold_effect_counts')) THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM ledger_effectcountdelta RETURNING agent_id, kind, tool, status, n
    ), summed AS (
        SELECT agent_id, kind, tool, status, sum(n) AS n, count(*) AS deltas
          FROM gone GROUP BY agent_id, kind, tool, status
    ), applied AS (
        INSERT INTO ledger_effectcount AS c (agent_id, kind, tool, status, n)
        SELECT agent_id, kind, tool, status, n FROM summed
         ORDER BY agent_id, kind, tool, status
        ON CONFLICT (agent_id, kind, tool, status) DO UPDATE SET n = c.n + excluded.n
    )
    -- A data-modifying WITH runs once whether or not the query reads it.
    SELECT coalesce(sum(deltas), 0) INTO moved FROM summed;
    RETURN moved;
END
$$;

DROP TRIGGER IF EXISTS effect_count_insert ON ledger_effect;

CREATE TRIGGER effect_count_insert AFTER INSERT ON ledger_effect FOR EACH ROW EXECUTE FUNCTION ledger_effect_count_change();

DROP TRIGGER IF EXISTS effect_count_update ON ledger_effect;

CREATE TRIGGER effect_count_update AFTER UPDATE OF agent_id, kind, tool, status ON ledger_effect FOR EACH ROW WHEN (old.agent_id <> new.agent_id OR old.kind::text <> new.kind::text OR old.tool::text <> new.tool::text OR old.status::text <> new.status::text) EXECUTE FUNCTION ledger_effect_count_change();

DROP TRIGGER IF EXISTS effect_count_delete ON ledger_effect;

CREATE TRIGGER effect_count_delete AFTER DELETE ON ledger_effect FOR EACH ROW EXECUTE FUNCTION ledger_effect_count_change();
