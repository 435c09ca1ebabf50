-- Waiters (GET /api/v1/runs/{id}/?wait=N) hear of a run's status change through LISTEN/NOTIFY.
--
-- An AFTER UPDATE trigger on runs_run notifies channel `ledger_run_status` with the run id
-- whenever the status changes; the notification is delivered at commit, so a waiter that reads
-- the run on hearing it sees the committed status. The WHEN clause keeps the trigger off every
-- update that does not change the status (the hot journal calls: counters, heads, leases).
-- No kernel function is replaced.

CREATE OR REPLACE FUNCTION runs_run_status_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ledger_run_status', NEW.id::text);
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS runs_run_status_notify ON runs_run;
CREATE TRIGGER runs_run_status_notify
    AFTER UPDATE OF status ON runs_run
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION runs_run_status_notify();
