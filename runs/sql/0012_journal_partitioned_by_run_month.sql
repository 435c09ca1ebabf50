-- The journal, partitioned by the month its run was created in (issue 17, "Data that grows").
--
-- runs_step and runs_event are PARTITION BY RANGE (journal_month): the first day (UTC) of the
-- month their run was created in, copied from runs_run.journal_month by whoever writes the row
-- (a BEFORE ROW trigger cannot move a row to another partition, so the kernel supplies it).
-- A composite foreign key (run_id, journal_month) -> runs_run (id, journal_month) keeps every
-- row of a run in its run's month. Each month is one partition per table (runs_step_y2026m11,
-- runs_event_y2026m11); the DEFAULT partitions runs_step_keep / runs_event_keep hold the rows
-- of runs retention kept back when it dropped their month (in review, on legal hold, live...):
-- their month has no partition any more, so their rows, and any row they write later, land there.
--
-- Replaces, with the same signatures: ledger_outcome_apply, ledger_step_intent (0007's, with its
-- approval rules), ledger_step_outcome, ledger_lease (0003), runs_event_continues_chain (0004);
-- re-creates ledger_answer_fill (its runs_step argument type was re-made). Adds an overload
-- ledger_event_append(run, month, ...) the kernel calls; the 0003 signature stays for callers
-- that do not know the month (it reads it from the run). New: ledger_journal_partition(month),
-- ledger_journal_partitions_ensure(from, to).
--
-- Every lookup of a step or an event names run_id AND journal_month, so the planner prunes to
-- one partition (at run time, inside these functions' cached plans).

CREATE OR REPLACE FUNCTION ledger_journal_partition(p_month date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    m date := date_trunc('month', p_month)::date;
    suffix text := to_char(m, '"y"YYYY"m"MM');
    t text;
    created boolean := false;
BEGIN
    FOREACH t IN ARRAY ARRAY['runs_step', 'runs_event'] LOOP
        IF to_regclass(t || '_' || suffix) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                t || '_' || suffix, t, m, (m + interval '1 month')::date);
            created := true;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

-- The month partitions from p_from to p_to (inclusive), made ahead of the rows that need them.
-- A month whose rows already sit in the keep partition (a month retention dropped, or one nobody
-- made in time) is skipped with a warning: its rows stay where they are.
CREATE OR REPLACE FUNCTION ledger_journal_partitions_ensure(p_from date, p_to date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    m date := date_trunc('month', p_from)::date;
    made integer := 0;
BEGIN
    WHILE m <= p_to LOOP
        BEGIN
            IF ledger_journal_partition(m) THEN
                made := made + 1;
            END IF;
        EXCEPTION WHEN check_violation THEN
            RAISE WARNING 'journal month % not partitioned: its rows are in the keep partition', m;
        END;
        m := (m + interval '1 month')::date;
    END LOOP;
    RETURN made;
END
$$;

CREATE OR REPLACE FUNCTION ledger_event_append(
    p_run uuid, p_month date, p_seq integer, p_prev text, p_type text, p_payload text,
    p_prefix text, p_actor text, p_at timestamptz
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    digest text;
BEGIN
    digest := encode(sha256(convert_to(
        p_prev || p_prefix || p_payload || ',"run":"' || p_run::text || '","seq":' || p_seq
        || ',"type":"' || p_type || '"}', 'UTF8')), 'hex');
    INSERT INTO runs_event (run_id, journal_month, seq, type, payload, actor, at, prev_hash, hash)
    VALUES (p_run, p_month, p_seq, p_type, p_payload::jsonb, p_actor, p_at, p_prev, digest);
    RETURN digest;
END
$$;

-- The signature of 0003, for callers that do not have the run's month at hand.
CREATE OR REPLACE FUNCTION ledger_event_append(
    p_run uuid, p_seq integer, p_prev text, p_type text, p_payload text,
    p_prefix text, p_actor text, p_at timestamptz
) RETURNS text
LANGUAGE sql AS $$
    SELECT ledger_event_append(p_run, (SELECT journal_month FROM runs_run WHERE id = p_run),
        p_seq, p_prev, p_type, p_payload, p_prefix, p_actor, p_at)
$$;

-- An inserted event must continue its run's chain (0004); the previous event is looked up in
-- the run's own month, so the check touches one partition.
CREATE OR REPLACE FUNCTION runs_event_continues_chain() RETURNS trigger AS $$
DECLARE
    previous text;
BEGIN
    IF NEW.seq = 1 THEN
        previous := repeat('0', 64);
    ELSE
        SELECT hash INTO previous FROM runs_event
        WHERE run_id = NEW.run_id AND seq = NEW.seq - 1 AND journal_month = NEW.journal_month;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'runs_event: event % of run % follows no event %',
                NEW.seq, NEW.run_id, NEW.seq - 1 USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    IF NEW.prev_hash IS DISTINCT FROM previous THEN
        RAISE EXCEPTION 'runs_event: event % of run % does not name the previous event''s hash',
            NEW.seq, NEW.run_id USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION ledger_answer_fill(
    a INOUT ledger_step_answer, s runs_step, r runs_run, p_arguments boolean, p_result boolean
)
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    a.step_id := s.id; a.state := s.state; a.usage_input_tokens := s.usage_input_tokens;
    a.usage_output_tokens := s.usage_output_tokens; a.usage_cost_usd := s.usage_cost_usd;
    a.epoch := s.epoch; a.intent_at := s.intent_at; a.outcome_at := s.outcome_at;
    a.kind := s.kind; a.name := s.name; a.effect := s.effect; a.enforced_by := s.enforced_by;
    a.arguments_hash := s.arguments_hash; a.idempotency_key := s.idempotency_key;
    a.resolution_action := s.resolution_action; a.resolution_by := s.resolution_by;
    a.resolution_note := s.resolution_note; a.resolution_at := s.resolution_at;
    IF p_arguments THEN
        a.arguments := s.arguments;
    END IF;
    IF p_result THEN
        a.result := s.result;
    END IF;
    a.limit_steps := r.limit_steps; a.limit_tokens := r.limit_tokens;
    a.limit_cost_usd := r.limit_cost_usd; a.limit_wall_seconds := r.limit_wall_seconds;
    a.limit_recoveries := r.limit_recoveries; a.used_steps := r.used_steps;
    a.used_tokens := r.used_tokens; a.used_cost_usd := r.used_cost_usd;
    a.used_recoveries := r.used_recoveries; a.deadline := r.deadline;
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
            r.status := 'budget_exceeded';
            r.status_reason := (stopped::jsonb)->>'limit';
            r.event_seq := r.event_seq + 1;
            r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head,
                'budget_exceeded', stopped, p_prefix, p_actor, p_now);
        END IF;
    END IF;
    RETURN r;
END
$$;

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
        r.status := 'budget_exceeded';
        r.status_reason := (limit_payload::jsonb)->>'limit';
        r.event_seq := r.event_seq + 1;
        r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head, 'budget_exceeded',
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
    r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head, 'step_intent',
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
            r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head, 'approval_requested',
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
    INSERT INTO runs_step (run_id, journal_month, "index", kind, name, effect, enforced_by, arguments,
        arguments_hash, idempotency_key, state, result, usage_input_tokens, usage_output_tokens,
        usage_cost_usd, epoch, intent_at, outcome_at, executions)
    VALUES (s.run_id, r.journal_month, s."index", s.kind, s.name, s.effect, s.enforced_by, s.arguments,
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

CREATE OR REPLACE FUNCTION ledger_step_outcome(
    p_run uuid, p_epoch bigint, p_index integer, p_ok boolean, p_result text,
    p_in bigint, p_out bigint, p_cost numeric,
    p_now timestamptz, p_actor text, p_prefix text, p_outcome_payload text
) RETURNS ledger_step_answer
LANGUAGE plpgsql AS $$
DECLARE
    r runs_run;
    s runs_step;
    a ledger_step_answer;
    stopped text;
    was_running boolean;
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

CREATE OR REPLACE FUNCTION ledger_lease(
    p_run uuid, p_worker text, p_worker_json text, p_ttl integer,
    p_now timestamptz, p_actor text, p_prefix text,
    OUT code text, OUT details jsonb, OUT run runs_run
)
LANGUAGE plpgsql AS $$
DECLARE
    r runs_run;
    limit_payload text;
    lease_live boolean;
    expires_at timestamptz;
BEGIN
    SELECT * INTO r FROM runs_run WHERE id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        code := 'not_found'; RETURN;
    END IF;
    SELECT f.code, f.details INTO code, details FROM ledger_status_refusal(r) f;
    IF code IS NOT NULL THEN
        RETURN;
    END IF;
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
        r.status := 'budget_exceeded';
        r.status_reason := (limit_payload::jsonb)->>'limit';
        r.event_seq := r.event_seq + 1;
        r.event_head := ledger_event_append(r.id, r.journal_month, r.event_seq, r.event_head, 'budget_exceeded',
            limit_payload, p_prefix, p_actor, p_now);
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
