-- Approvals (issue 15): the journal kernel's intent, taught approval rules.
--
-- Replaces ONE function of 0003_journal_kernel.sql, ledger_step_intent (same signature, same one
-- round trip); everything else there stands. The changes:
--   * a new write intent matching an active runs_approvalrule row is journalled as usual
--     (step_intent), then moves to `awaiting_approval` (event approval_requested, a
--     runs_approvalrequest row); the worker's answer carries that state (the API says 202);
--   * a replay of a `denied` step is refused with `approval_denied` (who, when, the note);
--   * a replay of an approved step not yet handed to a worker (state intent, executions 0) hands
--     it over: executions 1 under the caller's epoch, so recovery treats it as an open intent.
-- The approve / deny / expire transitions are Python services (runs.services), as resolutions are.

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
    r runs_run;
    s runs_step;
    a ledger_step_answer;
    limit_payload text;
    stopped text;
    rule runs_approvalrule;
    approval_expires timestamptz;
BEGIN
    SELECT * INTO r FROM runs_run WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        a.code := 'not_found'; RETURN a;
    END IF;
    IF p_epoch <> r.epoch THEN
        a.code := 'stale_epoch';
        a.details := jsonb_build_object('epoch', p_epoch, 'current_epoch', r.epoch);
        RETURN a;
    END IF;
    SELECT f.code, f.details INTO a.code, a.details FROM ledger_status_refusal(r) f;
    IF a.code IS NOT NULL THEN
        RETURN a;
    END IF;

    IF p_index < r.step_count THEN
        SELECT * INTO s FROM runs_step WHERE run_id = p_run AND "index" = p_index FOR UPDATE;
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
            UPDATE runs_step SET executions = 1, epoch = r.epoch WHERE id = s.id;
        END IF;
        IF s.state <> 'interrupted' THEN
            a.created := false;
            RETURN ledger_answer_fill(a, s, r, true, true);
        END IF;
        -- re-execution of an interrupted step: same key, new epoch, no new step of budget
        s.state := 'intent'; s.epoch := r.epoch; s.intent_at := p_now;
        s.executions := s.executions + 1;
        r.event_seq := r.event_seq + 1;
        r.event_head := ledger_event_append(r.id, r.event_seq, r.event_head, 'step_reopened',
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
        WHERE id = s.id;
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
        r.status := 'budget_exceeded';
        r.status_reason := (limit_payload::jsonb)->>'limit';
        r.event_seq := r.event_seq + 1;
        r.event_head := ledger_event_append(r.id, r.event_seq, r.event_head, 'budget_exceeded',
            limit_payload, p_prefix, p_actor, p_now);
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
    r.event_head := ledger_event_append(r.id, r.event_seq, r.event_head, 'step_intent',
        p_intent_payload, p_prefix, p_actor, p_now);
    IF p_effect = 'write' AND NOT p_outcome THEN
        -- approval rules (runs.models.ApprovalRule): a glob on the tool name, `*` = any text
        SELECT * INTO rule FROM runs_approvalrule ar
        WHERE ar.active AND (ar.agent = '' OR ar.agent = r.agent)
          AND p_name LIKE replace(replace(replace(replace(ar.tool_pattern, '\', '\\'), '%', '\%'),
                                                  '_', '\_'), '*', '%')
        ORDER BY ar.approvals_required DESC, (ar.agent = '') ASC, ar.id
        LIMIT 1;
        IF FOUND THEN
            s.state := 'awaiting_approval'; s.executions := 0;
            IF rule.expires_after_seconds IS NOT NULL THEN
                approval_expires := p_now + make_interval(secs => rule.expires_after_seconds);
            END IF;
            r.event_seq := r.event_seq + 1;
            r.event_head := ledger_event_append(r.id, r.event_seq, r.event_head, 'approval_requested',
                '{"approvals_required":' || rule.approvals_required
                || ',"arguments_hash":"' || p_args_hash
                || '","expires_at":' || COALESCE('"' || ledger_iso(approval_expires) || '"', 'null')
                || ',"index":' || p_index || ',"rule":' || rule.id || '}',
                p_prefix, p_actor, p_now);
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
    INSERT INTO runs_step (run_id, "index", kind, name, effect, enforced_by, arguments,
        arguments_hash, idempotency_key, state, result, usage_input_tokens, usage_output_tokens,
        usage_cost_usd, epoch, intent_at, outcome_at, executions)
    VALUES (s.run_id, s."index", s.kind, s.name, s.effect, s.enforced_by, s.arguments,
        s.arguments_hash, s.idempotency_key, s.state, s.result, s.usage_input_tokens,
        s.usage_output_tokens, s.usage_cost_usd, s.epoch, s.intent_at, s.outcome_at, s.executions)
    RETURNING id INTO s.id;
    IF s.state = 'awaiting_approval' THEN
        INSERT INTO runs_approvalrequest (step_id, rule_id, arguments_hash, approvals_required,
            requested_at, expires_at, outcome)
        VALUES (s.id, rule.id, p_args_hash, rule.approvals_required, p_now, approval_expires,
            'pending');
    END IF;
    PERFORM ledger_run_counters_save(r);
    a.created := true;
    IF stopped IS NOT NULL THEN
        a.code := 'budget_exceeded'; a.details := stopped::jsonb;
    END IF;
    RETURN ledger_answer_fill(a, s, r, false, false);
END
$$;

