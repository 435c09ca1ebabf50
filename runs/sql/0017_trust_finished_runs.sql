-- Cancel moves the epoch (issue 40, "finishing a run accounts for its writes"), and the worker
-- that held the run when an admin cancelled it must still learn that the run is over
-- (run_finished), not that someone took it over (stale_epoch): a cancelled run answers
-- run_finished to the epoch it was cancelled under (its epoch minus one). Older epochs stay
-- stale_epoch, as for any run. An outcome in flight when the run was cancelled is still
-- recorded: its step is the open intent of the epoch the outcome names, and the effect happened.
--
-- Replaces, with the same signatures: ledger_run_locked and ledger_step_outcome (0014).

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
        IF run.status = 'cancelled' AND p_epoch = run.epoch - 1 THEN
            SELECT f.code, f.details INTO code, details FROM ledger_status_refusal(run) f;
            RETURN;
        END IF;
        code := 'stale_epoch';
        details := jsonb_build_object('epoch', p_epoch, 'current_epoch', run.epoch);
        RETURN;
    END IF;
    IF p_status THEN
        SELECT f.code, f.details INTO code, details FROM ledger_status_refusal(run) f;
    END IF;
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
    r := locked.run;
    IF locked.code = 'run_finished' AND r.status = 'cancelled' THEN
        -- the outcome of the intent its worker journalled under this epoch before the cancel
        SELECT * INTO s FROM runs_step
        WHERE run_id = p_run AND "index" = p_index AND journal_month = r.journal_month
          AND state = 'intent' AND epoch = p_epoch FOR UPDATE;
        IF FOUND THEN
            locked.code := NULL;
        END IF;
    END IF;
    IF locked.code IS NOT NULL THEN
        a.code := locked.code; a.details := locked.details; RETURN a;
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
