-- Approval requests keyed by their run (issue 17): a new request row carries its run's id and
-- journal_month (which are its step's: ledger_step_intent's step record does not carry the
-- month), so runs_approvalrequest's primary key (id, run_id), its unique (run_id, step_id) and
-- its foreign keys to the step and the run hold for it (runs 0015).
--
-- Replaces, with the same signature: ledger_approval_request (0014). Same event, same answer.

-- A step (already inserted, state awaiting_approval) held by `rule`: its approval_requested
-- event and its pending runs_approvalrequest row. Answers the run with the event appended.
CREATE OR REPLACE FUNCTION ledger_approval_request(
    r runs_run, s runs_step, rule runs_approvalrule, p_now timestamptz, p_prefix text, p_actor text
) RETURNS runs_run
LANGUAGE plpgsql AS $$
DECLARE
    expires timestamptz;
BEGIN
    IF rule.expires_after_seconds IS NOT NULL THEN
        expires := p_now + make_interval(secs => rule.expires_after_seconds);
    END IF;
    r.event_seq := r.event_seq + 1;
    r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head,
        'approval_requested',
        '{"approvals_required":' || rule.approvals_required
        || ',"arguments_hash":"' || s.arguments_hash
        || '","expires_at":' || COALESCE('"' || ledger_iso(expires) || '"', 'null')
        || ',"index":' || s."index" || ',"rule":' || rule.id || '}',
        p_prefix, p_actor, p_now);
    INSERT INTO runs_approvalrequest (run_id, journal_month, step_id, rule_id, arguments_hash,
        approvals_required, requested_at, expires_at, outcome)
    VALUES (r.id, r.journal_month, s.id, rule.id, s.arguments_hash, rule.approvals_required,
        p_now, expires, 'pending');
    RETURN r;
END
$$;
