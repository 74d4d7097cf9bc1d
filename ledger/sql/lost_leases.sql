-- A lease that ran out is a crash, not a try the tool's attempt cap is for
-- (`ledger.effects.recovery`): when an effect leaves `dispatching` after its lease expired,
-- and goes back to be sent again or asked about (planned, unknown, awaiting_confirmation),
-- the attempt its lost claim took is given back and `lost_leases` counts the loss.
--
-- At most five losses are given back: a tool that kills its process every time it runs then
-- spends its attempts like any other failure, and ends in review. An effect that leaves
-- `dispatching` by its owner's report, or whose lease is still live, keeps its attempt.

CREATE OR REPLACE FUNCTION ledger_lost_lease() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.lease_expires_at IS NULL OR OLD.lease_expires_at > now() THEN
        RETURN NEW;
    END IF;
    NEW.lost_leases := OLD.lost_leases + 1;
    IF OLD.lost_leases < 5 AND NEW.attempt > 0
       AND NEW.status IN ('planned', 'unknown', 'awaiting_confirmation') THEN
        NEW.attempt := NEW.attempt - 1;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER effect_lost_lease BEFORE UPDATE OF status ON ledger_effect FOR EACH ROW WHEN (old.status::text = 'dispatching'::text AND new.status::text IS DISTINCT FROM 'dispatching'::text) EXECUTE FUNCTION ledger_lost_lease();
