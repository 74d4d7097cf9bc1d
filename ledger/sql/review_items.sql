-- Review items carry copies of their effect's tool, agent, run and creation time, written by
-- this trigger on every new item, so that the review queue filters, sorts and pages on the
-- review-item table alone (`ledger.rules.reviewqueue`, the queue's indexes).

CREATE OR REPLACE FUNCTION ledger_review_item_copies()
 RETURNS trigger
 LANGUAGE plpgsql
AS $$
BEGIN
    SELECT e.tool, e.agent_id, e.run_id, e.created_at
      INTO NEW.tool, NEW.agent_id, NEW.run_id, NEW.effect_created_at
      FROM ledger_effect e WHERE e.id = NEW.effect_id;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS review_item_copies ON reviews_reviewitem;

CREATE TRIGGER review_item_copies BEFORE INSERT ON reviews_reviewitem FOR EACH ROW WHEN (new.tool IS NULL) EXECUTE FUNCTION ledger_review_item_copies();
