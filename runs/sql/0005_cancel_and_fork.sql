-- Run actions (issue 16): `cancelled` is a final status, so the kernel refuses a worker's next
-- write to a cancelled run with run_finished, as it does for completed, failed and abandoned.
-- Replaces ledger_status_refusal (0003) and nothing else: every kernel function that checks the
-- status (ledger_step_intent, ledger_lease) calls it.

CREATE OR REPLACE FUNCTION ledger_status_refusal(r runs_run, OUT code text, OUT details jsonb)
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF r.status = 'needs_review' THEN
        code := 'needs_review'; details := jsonb_build_object('reason', r.status_reason);
    ELSIF r.status = 'budget_exceeded' THEN
        code := 'budget_exceeded'; details := jsonb_build_object('limit', r.status_reason);
    ELSIF r.status IN ('completed', 'failed', 'abandoned', 'cancelled') THEN
        code := 'run_finished'; details := jsonb_build_object('status', r.status);
    END IF;
END
$$;
