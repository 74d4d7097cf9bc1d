-- Halts (`ledger.containment.halts`): the one coverage rule, and the triggers that apply it to
-- every claim, whichever process makes it.
--
-- A tool halt stops every effect of its tool. Agent, run and `all` halts stop actions, and the
-- agent's own compensations; a compensation an operator decided keeps running (halting the
-- agent that double-charged must not stop its refunds) unless the halt says
-- include_compensations. A run halt with `teams` (one made by a person scoped to teams) covers
-- only that run's agents of those teams and agents of no team; without, every agent's.
-- Decisions are never claimed and never covered.

CREATE OR REPLACE FUNCTION ledger_covering_halt(
    p_kind text, p_tool text, p_agent_id bigint, p_run_id text, p_requested_by text
) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT h.id FROM ledger_halt h
     WHERE h.resumed_at IS NULL
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

-- The same after taking the halts' advisory lock SHARED (1751215220 is "halt" in ASCII,
-- `ledger.containment.halts.HALT_LOCK`). `halt()` takes it EXCLUSIVELY before inserting, so
-- once it has returned no claim it covers can commit. The check is a statement of its own after the lock
-- is granted: under READ COMMITTED it sees a halt committed while the claim waited.
CREATE OR REPLACE FUNCTION ledger_halt_for_claim(
    p_kind text, p_tool text, p_agent_id bigint, p_run_id text, p_requested_by text
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1751215220);
    RETURN ledger_covering_halt(p_kind, p_tool, p_agent_id, p_run_id, p_requested_by);
END
$$;

-- Fired on `planned → dispatching` (effect_claim_halted) and on an effect inserted already
-- dispatching (effect_claim_halted_insert): raises `ledger_halted` (SQLSTATE P0001) with the
-- halt as JSON in DETAIL, which the API answers as 409 `halted`.
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

-- The claim (`planned → dispatching`) and an intent inserted with its claim.
DROP TRIGGER IF EXISTS effect_claim_halted ON ledger_effect;

CREATE TRIGGER effect_claim_halted BEFORE UPDATE OF status ON ledger_effect FOR EACH ROW WHEN (old.status::text = 'planned'::text AND new.status::text = 'dispatching'::text) EXECUTE FUNCTION ledger_effect_claim_halted();

DROP TRIGGER IF EXISTS effect_claim_halted_insert ON ledger_effect;

CREATE TRIGGER effect_claim_halted_insert BEFORE INSERT ON ledger_effect FOR EACH ROW WHEN (new.status::text = 'dispatching'::text) EXECUTE FUNCTION ledger_effect_claim_halted();
