-- The journal kernel, each rule written once (issue 18, "one source for every rule").
--
-- Same signatures, same answers, same events and hashes as before; what moved:
--   * the prologue of the hot calls (lock the run, not_found, stale_epoch, the status refusal)
--     is ledger_run_locked, called by ledger_step_intent, ledger_step_outcome, ledger_lease and
--     ledger_heartbeat;
--   * stopping a run at a limit (status, reason, budget_exceeded event) is ledger_run_budget_stop,
--     called by ledger_step_intent, ledger_lease and ledger_outcome_apply;
--   * the approval rules of a new write intent (issue 15) are ledger_approval_rule (which rule
--     holds the step) and ledger_approval_request (its approval_requested event and request
--     row), so ledger_step_intent has one body. The approval_requested event is appended after
--     the step's row is inserted rather than before: same seq, same bytes, same hash.
--
-- Replaces, with the same signatures: ledger_step_intent, ledger_step_outcome, ledger_lease,
-- ledger_outcome_apply (0012) and ledger_heartbeat (0003). New: ledger_run_locked,
-- ledger_run_budget_stop, ledger_approval_rule, ledger_approval_request.

-- The run, locked for this transaction, or the refusal every worker write starts with:
-- not_found; stale_epoch when p_epoch is given and is not the run's; with p_status, the refusal
-- by the run's status (ledger_status_refusal). A refusal here has changed nothing.
CREATE OR REPLACE FUNCTION ledger_run_locked(
    p_run uuid, p_epoch bigint, p_status boolean,
    OUT code text, OUT details jsonb, OUT run runs_run
)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT * INTO run FROM runs_run WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        code := 'not_found'; RETURN;
    END IF;
    IF p_epoch <> run.epoch THEN
        code := 'stale_epoch';
        details := jsonb_build_object('epoch', p_epoch, 'current_epoch', run.epoch);
        RETURN;
    END IF;
    IF p_status THEN
        SELECT f.code, f.details INTO code, details FROM ledger_status_refusal(run) f;
    END IF;
END
$$;

-- The run stopped at the limit p_limit_payload names (ledger_exceeded_limit's payload), with its
-- budget_exceeded event appended; the caller saves it.
CREATE OR REPLACE FUNCTION ledger_run_budget_stop(
    r runs_run, p_limit_payload text, p_now timestamptz, p_prefix text, p_actor text
) RETURNS runs_run
LANGUAGE plpgsql AS $$
BEGIN
    r.status := 'budget_exceeded';
    r.status_reason := (p_limit_payload::jsonb)->>'limit';
    r.event_seq := r.event_seq + 1;
    r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head,
        'budget_exceeded', p_limit_payload, p_prefix, p_actor, p_now);
    RETURN r;
END
$$;

-- The approval rule (runs.models.ApprovalRule) that holds a new write intent of this agent's
-- tool for people, or a row of NULLs: a glob on the tool name, `*` = any text; the strictest
-- rule first, an agent's own before the rule for every agent.
CREATE OR REPLACE FUNCTION ledger_approval_rule(p_agent text, p_name text)
RETURNS runs_approvalrule
LANGUAGE plpgsql STABLE AS $$
DECLARE
    rule runs_approvalrule;
BEGIN
    SELECT * INTO rule FROM runs_approvalrule ar
    WHERE ar.active AND (ar.agent = '' OR ar.agent = p_agent)
      AND p_name LIKE replace(replace(replace(replace(ar.tool_pattern, '\', '\\'), '%', '\%'),
                                              '_', '\_'), '*', '%')
    ORDER BY ar.approvals_required DESC, (ar.agent = '') ASC, ar.id
    LIMIT 1;
    RETURN rule;
END
$$;

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
    INSERT INTO runs_approvalrequest (step_id, rule_id, arguments_hash, approvals_required,
        requested_at, expires_at, outcome)
    VALUES (s.id, rule.id, s.arguments_hash, rule.approvals_required, p_now, expires, 'pending');
    RETURN r;
END
$$;

CREATE OR REPLACE FUNCTION ledger_outcome_apply(
    r runs_run, p_ok boolean, p_in bigint, p_out bigint, p_cost numeric, p_now timestamptz,
    p_prefix text, p_actor text, p_outcome_payload text, p_budget_check boolean
) RETURNS runs_run
LANGUAGE plpgsql AS $$
DECLARE
    stopped text;
BEGIN
    r.used_tokens := r.used_tokens + p_in + p_out;
    r.used_cost_usd := r.used_cost_usd + p_cost;
    r.event_seq := r.event_seq + 1;
    r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head,
        CASE WHEN p_ok THEN 'step_done' ELSE 'step_error' END, p_outcome_payload, p_prefix, p_actor, p_now);
    IF p_budget_check THEN
        stopped := ledger_exceeded_limit(r, p_now, false);
        IF stopped IS NOT NULL THEN
            r := ledger_run_budget_stop(r, stopped, p_now, p_prefix, p_actor);
        END IF;
    END IF;
    RETURN r;
END
$$;

-- POST /runs/{id}/steps/: a new intent, a replay, or the re-execution of an interrupted step;
-- with p_outcome (read steps) the outcome in the same call.
CREATE OR REPLACE FUNCTION ledger_step_intent(
    p_run uuid, p_epoch bigint, p_index integer, p_kind text, p_name text, p_effect text,
    p_enforced_by text, p_arguments text, p_args_hash text, p_key text,
    p_now timestamptz, p_actor text, p_prefix text, p_intent_payload text, p_reopen_payload text,
    p_outcome boolean, p_ok boolean, p_result text, p_in bigint, p_out bigint, p_cost numeric,
    p_outcome_payload text
) RETURNS ledger_step_answer
LANGUAGE plpgsql AS $$
DECLARE
    locked record;
    r runs_run;
    s runs_step;
    a ledger_step_answer;
    limit_payload text;
    stopped text;
    rule runs_approvalrule;
BEGIN
    locked := ledger_run_locked(p_run, p_epoch, true);
    IF locked.code IS NOT NULL THEN
        a.code := locked.code; a.details := locked.details; RETURN a;
    END IF;
    r := locked.run;

    IF p_index < r.step_count THEN
        SELECT * INTO s FROM runs_step
        WHERE run_id = p_run AND "index" = p_index AND journal_month = r.journal_month FOR UPDATE;
        IF (s.kind, s.name, s.effect, s.arguments_hash) IS DISTINCT FROM (p_kind, p_name, p_effect, p_args_hash) THEN
            a.code := 'nondeterministic';
            a.details := jsonb_build_object(
                'index', p_index,
                'recorded', jsonb_build_object('name', s.name, 'kind', s.kind, 'effect', s.effect,
                                               'arguments_hash', s.arguments_hash),
                'given', jsonb_build_object('name', p_name, 'kind', p_kind, 'effect', p_effect,
                                            'arguments_hash', p_args_hash));
            RETURN a;
        END IF;
        IF s.state = 'unknown' THEN
            a.code := 'needs_review'; a.details := jsonb_build_object('index', p_index);
            RETURN a;
        END IF;
        IF s.state = 'denied' THEN
            a.code := 'approval_denied';
            a.details := jsonb_build_object('index', p_index, 'action', s.resolution_action,
                'by', s.resolution_by, 'note', s.resolution_note, 'at', ledger_iso(s.resolution_at));
            RETURN a;
        END IF;
        IF s.state = 'intent' AND s.executions = 0 THEN
            -- approved and now handed to this worker (under its epoch): from here on the tool
            -- may run, so recovery treats it as any open intent
            s.executions := 1; s.epoch := r.epoch;
            UPDATE runs_step SET executions = 1, epoch = r.epoch
            WHERE id = s.id AND run_id = p_run AND journal_month = r.journal_month;
        END IF;
        IF s.state <> 'interrupted' THEN
            a.created := false;
            RETURN ledger_answer_fill(a, s, r, true, true);
        END IF;
        -- re-execution of an interrupted step: same key, new epoch, no new step of budget
        s.state := 'intent'; s.epoch := r.epoch; s.intent_at := p_now;
        s.executions := s.executions + 1;
        r.event_seq := r.event_seq + 1;
        r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head, 'step_reopened',
            p_reopen_payload, p_prefix, p_actor, p_now);
        IF p_outcome THEN
            s.state := CASE WHEN p_ok THEN 'done' ELSE 'error' END; s.result := p_result::jsonb;
            s.usage_input_tokens := p_in; s.usage_output_tokens := p_out;
            s.usage_cost_usd := p_cost; s.outcome_at := p_now;
            r := ledger_outcome_apply(r, p_ok, p_in, p_out, p_cost, p_now, p_prefix, p_actor,
                p_outcome_payload, false);
        END IF;
        UPDATE runs_step SET state = s.state, epoch = s.epoch, intent_at = s.intent_at,
            executions = s.executions, result = s.result, usage_input_tokens = s.usage_input_tokens,
            usage_output_tokens = s.usage_output_tokens, usage_cost_usd = s.usage_cost_usd,
            outcome_at = s.outcome_at
        WHERE id = s.id AND run_id = p_run AND journal_month = r.journal_month;
        PERFORM ledger_run_counters_save(r);
        a.created := true;
        RETURN ledger_answer_fill(a, s, r, true, true);
    END IF;

    IF p_index > r.step_count THEN
        a.code := 'out_of_order';
        a.details := jsonb_build_object('index', p_index, 'expected_index', r.step_count);
        RETURN a;
    END IF;

    limit_payload := ledger_exceeded_limit(r, p_now, true);
    IF limit_payload IS NOT NULL THEN
        r := ledger_run_budget_stop(r, limit_payload, p_now, p_prefix, p_actor);
        PERFORM ledger_run_counters_save(r);
        a.code := 'budget_exceeded'; a.details := limit_payload::jsonb;
        RETURN a;
    END IF;

    s.run_id := p_run; s."index" := p_index; s.kind := p_kind; s.name := p_name;
    s.effect := p_effect; s.enforced_by := p_enforced_by; s.arguments := p_arguments::jsonb;
    s.arguments_hash := p_args_hash; s.idempotency_key := p_key; s.state := 'intent';
    s.usage_input_tokens := 0; s.usage_output_tokens := 0; s.usage_cost_usd := 0;
    s.epoch := r.epoch; s.intent_at := p_now; s.executions := 1;
    r.step_count := r.step_count + 1;
    r.used_steps := r.used_steps + 1;
    r.event_seq := r.event_seq + 1;
    r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head, 'step_intent',
        p_intent_payload, p_prefix, p_actor, p_now);
    IF p_effect = 'write' AND NOT p_outcome THEN
        rule := ledger_approval_rule(r.agent, p_name);
        IF rule.id IS NOT NULL THEN
            s.state := 'awaiting_approval'; s.executions := 0;
        END IF;
    END IF;
    IF p_outcome THEN
        s.state := CASE WHEN p_ok THEN 'done' ELSE 'error' END; s.result := p_result::jsonb;
        s.usage_input_tokens := p_in; s.usage_output_tokens := p_out;
        s.usage_cost_usd := p_cost; s.outcome_at := p_now;
        r := ledger_outcome_apply(r, p_ok, p_in, p_out, p_cost, p_now, p_prefix, p_actor,
            p_outcome_payload, true);
        IF r.status = 'budget_exceeded' THEN
            stopped := ledger_exceeded_limit(r, p_now, false);
        END IF;
    END IF;
    INSERT INTO runs_step (run_id, journal_month, "index", kind, name, effect, enforced_by, arguments,
        arguments_hash, idempotency_key, state, result, usage_input_tokens, usage_output_tokens,
        usage_cost_usd, epoch, intent_at, outcome_at, executions)
    VALUES (s.run_id, r.journal_month, s."index", s.kind, s.name, s.effect, s.enforced_by, s.arguments,
        s.arguments_hash, s.idempotency_key, s.state, s.result, s.usage_input_tokens,
        s.usage_output_tokens, s.usage_cost_usd, s.epoch, s.intent_at, s.outcome_at, s.executions)
    RETURNING id INTO s.id;
    IF s.state = 'awaiting_approval' THEN
        r := ledger_approval_request(r, s, rule, p_now, p_prefix, p_actor);
    END IF;
    PERFORM ledger_run_counters_save(r);
    a.created := true;
    IF stopped IS NOT NULL THEN
        a.code := 'budget_exceeded'; a.details := stopped::jsonb;
    END IF;
    RETURN ledger_answer_fill(a, s, r, false, false);
END
$$;

CREATE OR REPLACE FUNCTION ledger_step_outcome(
    p_run uuid, p_epoch bigint, p_index integer, p_ok boolean, p_result text,
    p_in bigint, p_out bigint, p_cost numeric,
    p_now timestamptz, p_actor text, p_prefix text, p_outcome_payload text
) RETURNS ledger_step_answer
LANGUAGE plpgsql AS $$
DECLARE
    locked record;
    r runs_run;
    s runs_step;
    a ledger_step_answer;
    stopped text;
    was_running boolean;
BEGIN
    locked := ledger_run_locked(p_run, p_epoch, false);
    IF locked.code IS NOT NULL THEN
        a.code := locked.code; a.details := locked.details; RETURN a;
    END IF;
    r := locked.run;
    SELECT * INTO s FROM runs_step
    WHERE run_id = p_run AND "index" = p_index AND journal_month = r.journal_month FOR UPDATE;
    IF NOT FOUND THEN
        a.code := 'step_not_found'; a.details := jsonb_build_object('index', p_index);
        RETURN a;
    END IF;
    IF s.state IN ('done', 'error') THEN
        IF (s.state = 'done') = p_ok AND s.result IS NOT DISTINCT FROM p_result::jsonb THEN
            a.created := false;
            RETURN ledger_answer_fill(a, s, r, true, true);
        END IF;
        a.code := 'outcome_conflict';
        a.details := jsonb_build_object('index', p_index, 'state', s.state, 'different', true);
        RETURN a;
    END IF;
    IF s.state <> 'intent' THEN
        a.code := 'outcome_conflict';
        a.details := jsonb_build_object('index', p_index, 'state', s.state);
        RETURN a;
    END IF;
    was_running := r.status = 'running';
    s.state := CASE WHEN p_ok THEN 'done' ELSE 'error' END; s.result := p_result::jsonb;
    s.usage_input_tokens := p_in; s.usage_output_tokens := p_out;
    s.usage_cost_usd := p_cost; s.outcome_at := p_now;
    r := ledger_outcome_apply(r, p_ok, p_in, p_out, p_cost, p_now, p_prefix, p_actor,
        p_outcome_payload, was_running);
    IF was_running AND r.status = 'budget_exceeded' THEN
        stopped := ledger_exceeded_limit(r, p_now, false);
    END IF;
    UPDATE runs_step SET state = s.state, result = s.result,
        usage_input_tokens = s.usage_input_tokens, usage_output_tokens = s.usage_output_tokens,
        usage_cost_usd = s.usage_cost_usd, outcome_at = s.outcome_at
    WHERE id = s.id AND run_id = p_run AND journal_month = r.journal_month;
    PERFORM ledger_run_counters_save(r);
    a.created := true;
    IF stopped IS NOT NULL THEN
        a.code := 'budget_exceeded'; a.details := stopped::jsonb;
    END IF;
    RETURN ledger_answer_fill(a, s, r, true, false);
END
$$;

-- POST /runs/{id}/heartbeat: extend the lease of the current epoch; no event.
CREATE OR REPLACE FUNCTION ledger_heartbeat(
    p_run uuid, p_epoch bigint, p_now timestamptz,
    OUT code text, OUT details jsonb, OUT status text, OUT epoch bigint, OUT expires_at timestamptz
)
LANGUAGE plpgsql AS $$
DECLARE
    locked record;
    r runs_run;
BEGIN
    locked := ledger_run_locked(p_run, p_epoch, false);
    IF locked.code IS NOT NULL THEN
        code := locked.code; details := locked.details; RETURN;
    END IF;
    r := locked.run;
    IF r.status = 'running' AND r.lease_worker IS NOT NULL THEN
        r.lease_expires_at := p_now + make_interval(secs => r.lease_ttl_seconds);
        UPDATE runs_run SET lease_expires_at = r.lease_expires_at WHERE id = p_run;
    END IF;
    status := r.status; epoch := r.epoch; expires_at := r.lease_expires_at;
END
$$;

-- POST /runs/{id}/lease when no recovery is needed (a new run, the holder renewing, a run
-- resumed after review). Anything that needs the recovery rules answers code 'recover' and
-- changes nothing: runs.services.run_lease_acquire applies them.
CREATE OR REPLACE FUNCTION ledger_lease(
    p_run uuid, p_worker text, p_worker_json text, p_ttl integer,
    p_now timestamptz, p_actor text, p_prefix text,
    OUT code text, OUT details jsonb, OUT run runs_run
)
LANGUAGE plpgsql AS $$
DECLARE
    locked record;
    r runs_run;
    limit_payload text;
    lease_live boolean;
    expires_at timestamptz;
BEGIN
    locked := ledger_run_locked(p_run, NULL, true);
    IF locked.code IS NOT NULL THEN
        code := locked.code; details := locked.details; RETURN;
    END IF;
    r := locked.run;
    lease_live := r.lease_expires_at IS NOT NULL AND r.lease_expires_at > p_now;
    IF r.status = 'running' AND r.lease_worker IS NOT NULL AND r.lease_worker <> p_worker AND lease_live THEN
        code := 'lease_held';
        details := jsonb_build_object('worker', r.lease_worker, 'expires_at', ledger_iso(r.lease_expires_at));
        RETURN;
    END IF;
    IF r.status = 'interrupted' OR (r.status = 'running' AND r.lease_worker IS NOT NULL) THEN
        code := 'recover'; RETURN;
    END IF;
    limit_payload := ledger_exceeded_limit(r, p_now, false);
    IF limit_payload IS NOT NULL THEN
        r := ledger_run_budget_stop(r, limit_payload, p_now, p_prefix, p_actor);
        PERFORM ledger_run_counters_save(r);
        code := 'budget_exceeded'; details := limit_payload::jsonb;
        RETURN;
    END IF;
    r.epoch := r.epoch + 1;
    r.event_seq := r.event_seq + 1;
    expires_at := p_now + make_interval(secs => p_ttl);
    r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head, 'lease_acquired',
        '{"epoch":' || r.epoch || ',"expires_at":"' || ledger_iso(expires_at)
        || '","previous_worker":' || COALESCE(to_json(r.lease_worker)::text, 'null')
        || ',"recovery":false,"replayable_steps":' || r.step_count || ',"worker":' || p_worker_json || '}',
        p_prefix, p_actor, p_now);
    UPDATE runs_run SET status = 'running', status_reason = '', epoch = r.epoch,
        leases_granted = r.leases_granted + 1, lease_worker = p_worker,
        lease_expires_at = expires_at, lease_ttl_seconds = p_ttl,
        event_seq = r.event_seq, event_head = r.event_head, updated_at = now()
    WHERE id = p_run
    RETURNING * INTO run;
END
$$;
