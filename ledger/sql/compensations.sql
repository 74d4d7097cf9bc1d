-- What an agent may compensate (`ledger.effects.compensation`): enforced on every insert of an
-- agent's compensation, whichever process writes it.
--
-- * The parent is the agent's own, and an agent's effect, not one an operator decided.
-- * The tool is the one the parent's tool declares in compensated_by; a parent whose tool
--   declares none can be compensated by an operator only.
-- * At most the compensating tool's compensations_per_parent (1 unless declared) agent
--   compensations per parent that are not cancelled; operators' are not counted.
--
-- The parent row is locked first, so two concurrent compensations of one parent are counted
-- one after the other. A refusal raises `ledger_compensation_refused` (SQLSTATE P0001) with
-- {"reason", "tool", "limit"} as JSON in DETAIL.

CREATE OR REPLACE FUNCTION ledger_agent_compensation_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    parent record;
    declared text;
    allowed integer;
    taken integer;
    refusal text;
BEGIN
    SELECT e.agent_id, e.tool, e.requested_by INTO parent
      FROM ledger_effect e WHERE e.id = NEW.parent_id FOR UPDATE;
    SELECT t.compensated_by INTO declared FROM ledger_tool t WHERE t.name = parent.tool;
    SELECT t.compensations_per_parent INTO allowed FROM ledger_tool t WHERE t.name = NEW.tool;
    allowed := COALESCE(allowed, 1);
    IF parent.agent_id IS NULL OR parent.agent_id IS DISTINCT FROM NEW.agent_id THEN
        refusal := 'not_own_parent';
    ELSIF parent.requested_by = 'operator' THEN
        refusal := 'operator_decided';
    ELSIF COALESCE(declared, '') = '' OR NEW.tool IS DISTINCT FROM declared THEN
        refusal := 'tool_not_declared';
    ELSE
        SELECT count(*) INTO taken FROM ledger_effect c
         WHERE c.parent_id = NEW.parent_id AND c.kind = 'compensation'
           AND c.requested_by = 'agent' AND c.status <> 'cancelled';
        IF taken >= allowed THEN
            refusal := 'limit_reached';
        END IF;
    END IF;
    IF refusal IS NOT NULL THEN
        RAISE EXCEPTION 'ledger_compensation_refused'
            USING ERRCODE = 'P0001',
                  DETAIL = json_build_object('reason', refusal, 'tool', declared,
                                             'limit', allowed)::text;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS effect_agent_compensation ON ledger_effect;

CREATE TRIGGER effect_agent_compensation BEFORE INSERT ON ledger_effect FOR EACH ROW WHEN (new.kind::text = 'compensation'::text AND new.requested_by::text = 'agent'::text) EXECUTE FUNCTION ledger_agent_compensation_check();
