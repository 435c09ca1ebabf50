"""The journal kernel as runs/sql/ledger.sql held it when this snapshot was
taken (`manage.py kernel_snapshot`); frozen: a later edit of ledger.sql makes a new
snapshot. Every statement is idempotent, so a database that already runs these bodies
is unchanged. Backwards leaves the functions as they are: a snapshot is not undone by
the one before it.
"""

from django.db import migrations

SQL = r"""-- The journal kernel: every live ledger_* function, the journal's trigger functions and their
-- triggers, in dependency order. This file is the one source; a fresh database gets it from the
-- newest snapshot migration in runs/migrations/ (`manage.py kernel_snapshot` writes one), and
-- tests/runs/test_kernel_source.py fails when the database runs a body this file does not hold.
-- Every statement is idempotent (CREATE OR REPLACE; DROP TRIGGER IF EXISTS, then CREATE TRIGGER).
--
-- Each hot worker call is one statement, one round trip, one transaction: the function takes the
-- run's row lock (ledger_run_locked), checks epoch and status, applies the transition the state
-- tables in runs/constants.py allow (generated below into ledger_transition_allowed, which the
-- guard triggers enforce), appends its events to the hash chain and updates the run's
-- counters, then answers. Refusals come back as (code, details); a refusal that changed state
-- (budget_exceeded) commits that change with its event before it is answered.
--
-- The chain: hash = sha256(prev_hash || canonical JSON of the event body). Python renders the
-- canonical text of everything it knows ("{"actor":…,"at":…,"payload":" and the payload); this
-- file adds the run id, seq and type, the parts only the locked row knows. runs/chain.py and the
-- offline verifier recompute the same bytes from the stored rows.
--
-- The journal is partitioned by the month its run was created in (runs_step, runs_event:
-- PARTITION BY RANGE (journal_month), made by runs/migrations/0001_initial.py): every lookup of a
-- step or an event names run_id AND journal_month, so the planner prunes to one partition.

-- What every step call answers: a refusal (code, details), or the step as the row's own type and
-- the run (its budget columns are what callers read). Declared once: the step's columns are
-- runs_step's, so a new column of the table is in the answer without a word here, and
-- runs.kernel reads it by the model's metadata. A type cannot be replaced in place: changing
-- it means a migration that drops it (and the functions using it) before the next snapshot.
DO $type$
BEGIN
    CREATE TYPE ledger_step_answer AS (
        code text,
        details jsonb,
        created boolean,
        step runs_step,           -- its arguments and result only when recorded before this call
        run runs_run
    );
EXCEPTION WHEN duplicate_object THEN NULL;
END
$type$;

CREATE OR REPLACE FUNCTION ledger_iso(ts timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    -- datetime.isoformat() of an aware UTC datetime: microseconds only when there are some
    SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN to_char(ts AT TIME ZONE 'UTC', 'US') = '000000' THEN ''
                ELSE '.' || to_char(ts AT TIME ZONE 'UTC', 'US') END
        || '+00:00'
$$;

CREATE OR REPLACE FUNCTION ledger_money(value numeric) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(value, 'FM999999999999990.000000')
$$;

-- A worker token's liveness, checked on every worker call in that call's own round trip and
-- implicit transaction: runs.authentication.token_live sends it after the call's first statement
-- in one simple query, so a revoked (or deleted) token raises SQLSTATE LT401 (the class LT is
-- ours: PostgreSQL uses none by that name) and the statement before it rolls back with it.
CREATE OR REPLACE FUNCTION ledger_token_live(p_token_hash text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM 1 FROM runs_workertoken WHERE token_hash = p_token_hash AND revoked_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the worker token was revoked' USING ERRCODE = 'LT401';
    END IF;
END
$$;

-- BEGIN generated from the transition tables in runs/constants.py
-- by `manage.py kernel_snapshot`: edit the tables, not this block (kernel_snapshot --check
-- fails while it is stale). The guard triggers below hold every status and state change
-- to it, the kernel's own assignments included.
CREATE OR REPLACE FUNCTION ledger_transition_allowed(p_kind text, p_from text, p_to text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT COALESCE(CASE p_kind
        WHEN 'run' THEN CASE p_from
            WHEN 'abandoned' THEN false
            WHEN 'budget_exceeded' THEN p_to IN ('abandoned', 'cancelled', 'running')
            WHEN 'cancelled' THEN false
            WHEN 'completed' THEN false
            WHEN 'failed' THEN false
            WHEN 'interrupted' THEN p_to IN ('abandoned', 'budget_exceeded', 'cancelled', 'needs_review', 'running')
            WHEN 'needs_review' THEN p_to IN ('abandoned', 'budget_exceeded', 'cancelled', 'running')
            WHEN 'pending' THEN p_to IN ('abandoned', 'budget_exceeded', 'cancelled', 'running')
            WHEN 'running' THEN p_to IN ('budget_exceeded', 'cancelled', 'completed', 'failed', 'interrupted', 'needs_review', 'running')
        END
        WHEN 'step' THEN CASE p_from
            WHEN 'abandoned' THEN false
            WHEN 'awaiting_approval' THEN p_to IN ('denied', 'intent')
            WHEN 'denied' THEN false
            WHEN 'done' THEN false
            WHEN 'error' THEN false
            WHEN 'intent' THEN p_to IN ('awaiting_approval', 'done', 'error', 'interrupted', 'unknown')
            WHEN 'interrupted' THEN p_to IN ('done', 'error', 'intent')
            WHEN 'unknown' THEN p_to IN ('abandoned', 'done', 'interrupted')
        END
    END, false)
$$;
-- END generated

-- A run's status and a step's state move only as the tables allow: the guard triggers (below)
-- refuse any other change, whether a service, a kernel function or a hand-written UPDATE makes
-- it. They fire only when the value changes, so the hot calls' counter updates skip them.
CREATE OR REPLACE FUNCTION runs_run_status_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ledger_transition_allowed('run', OLD.status, NEW.status) THEN
        RAISE EXCEPTION 'runs_run: run % cannot move from % to %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION runs_step_state_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT ledger_transition_allowed('step', OLD.state, NEW.state) THEN
        RAISE EXCEPTION 'runs_step: step % of run % cannot move from % to %',
            OLD."index", OLD.run_id, OLD.state, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

-- The first limit the run has reached, as the canonical payload of its budget_exceeded event,
-- or NULL. p_next_step: would one more intent fit? The budget rule's one copy: the services
-- outside the hot calls ask it too (runs.kernel.exceeded_limit).
CREATE OR REPLACE FUNCTION ledger_exceeded_limit(r runs_run, p_now timestamptz, p_next_step boolean)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_now >= r.deadline THEN
        RETURN '{"deadline":"' || ledger_iso(r.deadline) || '","limit":"wall_seconds","limit_value":'
            || r.limit_wall_seconds || '}';
    END IF;
    IF p_next_step AND r.used_steps >= r.limit_steps THEN
        RETURN '{"limit":"steps","limit_value":' || r.limit_steps || ',"used":' || r.used_steps || '}';
    END IF;
    IF r.used_tokens > r.limit_tokens OR (p_next_step AND r.used_tokens >= r.limit_tokens) THEN
        RETURN '{"limit":"tokens","limit_value":' || r.limit_tokens || ',"used":' || r.used_tokens || '}';
    END IF;
    IF r.limit_cost_usd IS NOT NULL AND (r.used_cost_usd > r.limit_cost_usd
            OR (p_next_step AND r.used_cost_usd >= r.limit_cost_usd)) THEN
        RETURN '{"limit":"cost_usd","limit_value":"' || ledger_money(r.limit_cost_usd)
            || '","used":"' || ledger_money(r.used_cost_usd) || '"}';
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION ledger_run_counters_save(r runs_run) RETURNS void
LANGUAGE sql AS $$
    UPDATE runs_run SET status = r.status, status_reason = r.status_reason,
        step_count = r.step_count, used_steps = r.used_steps, used_tokens = r.used_tokens,
        used_cost_usd = r.used_cost_usd, event_seq = r.event_seq, event_head = r.event_head,
        updated_at = now()
    WHERE id = r.id
$$;

CREATE OR REPLACE FUNCTION runs_event_append_only() RETURNS trigger AS $$
BEGIN
    -- the retention purge (a signed checkpoint is written first) is the one sanctioned delete,
    -- and only the table's owner (the role the retention job runs as) may make it
    IF TG_OP = 'DELETE'
        AND current_setting('agentledger.purge', true) = 'on'
        AND current_user = (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = TG_RELID)
    THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'runs_event is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;

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

CREATE OR REPLACE FUNCTION runs_run_status_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ledger_run_status', NEW.id::text);
    RETURN NULL;
END
$$;

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
            -- read directly, a partition is bound by the teams' boundary as its parent is
            PERFORM teams_boundary_apply((t || '_' || suffix)::regclass);
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

-- Every event is appended here, the hot calls' and the services' (runs.kernel.event_append): the
-- chain's hash is computed in one place.
-- The run's month and team come with it (the caller has the run's row): the event is filed in
-- its run's team without a lookup ((run_id, journal_month, team_id) references the run).
DROP FUNCTION IF EXISTS ledger_event_append(uuid, date, integer, text, text, text, text, text,
    timestamptz);
CREATE OR REPLACE FUNCTION ledger_event_append(
    p_run uuid, p_month date, p_team bigint, p_seq integer, p_prev text, p_type text,
    p_payload text, p_prefix text, p_actor text, p_at timestamptz
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    digest text;
BEGIN
    digest := encode(sha256(convert_to(
        p_prev || p_prefix || p_payload || ',"run":"' || p_run::text || '","seq":' || p_seq
        || ',"type":"' || p_type || '"}', 'UTF8')), 'hex');
    INSERT INTO runs_event (run_id, journal_month, team_id, seq, type, payload, actor, at,
        prev_hash, hash)
    VALUES (p_run, p_month, p_team, p_seq, p_type, p_payload::jsonb, p_actor, p_at, p_prev,
        digest);
    RETURN digest;
END
$$;

-- Without the month and team, for callers that do not have them at hand (read from the run).
CREATE OR REPLACE FUNCTION ledger_event_append(
    p_run uuid, p_seq integer, p_prev text, p_type text, p_payload text,
    p_prefix text, p_actor text, p_at timestamptz
) RETURNS text
LANGUAGE sql AS $$
    SELECT ledger_event_append(p_run, (SELECT journal_month FROM runs_run WHERE id = p_run),
        (SELECT team_id FROM runs_run WHERE id = p_run),
        p_seq, p_prev, p_type, p_payload, p_prefix, p_actor, p_at)
$$;

-- An inserted event must continue its run's chain; the previous event is looked up in
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
    -- what the caller sent is not sent back (a 10 KB result would cross the wire twice)
    IF NOT p_arguments THEN
        s.arguments := NULL;
    END IF;
    IF NOT p_result THEN
        s.result := NULL;
    END IF;
    a.step := s; a.run := r;
END
$$;

-- The run stopped at the limit p_limit_payload names (ledger_exceeded_limit's payload), with its
-- budget_exceeded event appended; the caller saves it (ledger_run_counters_save). The services'
-- budget stops come here too (runs.kernel.run_budget_stop).
CREATE OR REPLACE FUNCTION ledger_run_budget_stop(
    r runs_run, p_limit_payload text, p_now timestamptz, p_prefix text, p_actor text
) RETURNS runs_run
LANGUAGE plpgsql AS $$
BEGIN
    r.status := 'budget_exceeded';
    r.status_reason := (p_limit_payload::jsonb)->>'limit';
    r.event_seq := r.event_seq + 1;
    r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head,
        'budget_exceeded', p_limit_payload, p_prefix, p_actor, p_now);
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
    r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head,
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
    r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head,
        'approval_requested',
        '{"approvals_required":' || rule.approvals_required
        || ',"arguments_hash":"' || s.arguments_hash
        || '","expires_at":' || COALESCE('"' || ledger_iso(expires) || '"', 'null')
        || ',"index":' || s."index" || ',"rule":' || rule.id || '}',
        p_prefix, p_actor, p_now);
    INSERT INTO runs_approvalrequest (run_id, journal_month, team_id, step_id, rule_id,
        arguments_hash, approvals_required, requested_at, expires_at, outcome)
    VALUES (r.id, r.journal_month, r.team_id, s.id, rule.id, s.arguments_hash,
        rule.approvals_required, p_now, expires, 'pending');
    RETURN r;
END
$$;

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

-- === Recovery, the lease, the reaper, complete and fail ====================================
--
-- The recovery rules (docs/api.md) are applied here, and only here: by a lease after a lost
-- holder (ledger_lease) and by the reaper (ledger_lease_expire). What they need from the tool
-- side (a ledger-enforced key's state, a tool's own lookup) is asked by Python BEFORE the
-- statement, never under the run's lock: the statement names the steps it needs an answer for
-- (code 'ask', nothing changed), runs.services.recovery asks, and the statement is sent again
-- with the answers (p_answers, by step index):
--   {"<index>": {"key_state": {"state": absent|in_progress|completed|failed, "stale": bool,
--                              "response": <json>, "result_hash": <sha256 of its canonical JSON>}}}
--   {"<index>": {"lookup": {"source": …, "answer": completed|absent|no_answer, "detail": …}}}
-- p_lookup_tools names the tools that declare a lookup (LEDGER_TOOL_LOOKUPS): only their steps
-- are asked about, so a recovery with none costs one statement.

-- a JSON string (or null) as canonical JSON writes it (the escapes Python's json.dumps makes)
CREATE OR REPLACE FUNCTION ledger_json(value text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT COALESCE(to_json(value)::text, 'null')
$$;

-- Everything the kernel's run-level moves change (status, lease, epoch, counters, output),
-- saved at once; the caller holds the run's row lock.
CREATE OR REPLACE FUNCTION ledger_run_save(r runs_run) RETURNS runs_run
LANGUAGE sql AS $$
    UPDATE runs_run SET status = r.status, status_reason = r.status_reason, epoch = r.epoch,
        lease_worker = r.lease_worker, lease_expires_at = r.lease_expires_at,
        lease_ttl_seconds = r.lease_ttl_seconds, leases_granted = r.leases_granted,
        used_recoveries = r.used_recoveries, output = r.output, error = r.error,
        finished_at = r.finished_at, step_count = r.step_count, used_steps = r.used_steps,
        used_tokens = r.used_tokens, used_cost_usd = r.used_cost_usd, event_seq = r.event_seq,
        event_head = r.event_head, updated_at = now()
    WHERE id = r.id
    RETURNING *
$$;

-- The run waits for a person (status needs_review, no lease), with its needs_review event.
-- p_fence: the epoch moves on first (a lease whose recovery ends here), so the worker that lost
-- the lease can neither write nor heartbeat during the review; p_payload is the event's
-- canonical payload, the new epoch in it when fenced.
CREATE OR REPLACE FUNCTION ledger_needs_review(
    r runs_run, p_reason text, p_fence boolean, p_payload text,
    p_now timestamptz, p_prefix text, p_actor text
) RETURNS runs_run
LANGUAGE plpgsql AS $$
BEGIN
    r.status := 'needs_review'; r.status_reason := p_reason;
    r.lease_worker := NULL; r.lease_expires_at := NULL;
    IF p_fence THEN
        r.epoch := r.epoch + 1;
    END IF;
    r.event_seq := r.event_seq + 1;
    r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head,
        'needs_review', p_payload, p_prefix, p_actor, p_now);
    RETURN r;
END
$$;

-- The steps still `intent` whose recovery needs an answer p_answers does not hold: each
-- ledger-enforced write that may have run, and each write of a tool with a lookup. NULL: none.
CREATE OR REPLACE FUNCTION ledger_recovery_questions(r runs_run, p_answers jsonb, p_lookup_tools text[])
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_agg(jsonb_build_object('index', s."index", 'name', s.name,
            'idempotency_key', s.idempotency_key, 'enforced_by', s.enforced_by) ORDER BY s."index")
    FROM runs_step s
    WHERE s.run_id = r.id AND s.journal_month = r.journal_month AND s.state = 'intent'
      AND s.effect = 'write' AND s.executions > 0
      AND CASE WHEN s.enforced_by = 'ledger'
               THEN NOT COALESCE(p_answers -> (s."index"::text) ? 'key_state', false)
               ELSE s.name = ANY(p_lookup_tools)
                    AND NOT COALESCE(p_answers -> (s."index"::text) ? 'lookup', false)
          END
$$;

-- The recovery rules for every intent without an outcome, in index order, each step's move with
-- its event; `unknown` the steps a person must decide. The caller has checked that p_answers
-- answers every question (ledger_recovery_questions) and holds the run's row lock.
CREATE OR REPLACE FUNCTION ledger_recover_open_intents(
    r runs_run, p_answers jsonb, p_now timestamptz, p_prefix text, p_actor text,
    OUT run runs_run, OUT unknown integer[]
)
LANGUAGE plpgsql AS $$
DECLARE
    s runs_step;
    answer jsonb;
    lookup jsonb;
    key_state jsonb;
    settled text;       -- the key state the payload records
    why text;
    result_hash text;
    event_type text;
BEGIN
    unknown := '{}';
    FOR s IN SELECT * FROM runs_step
             WHERE run_id = r.id AND journal_month = r.journal_month AND state = 'intent'
             ORDER BY "index" FOR UPDATE
    LOOP
        answer := p_answers -> (s."index"::text);
        lookup := CASE WHEN s.executions > 0 AND s.effect = 'write'
                            AND s.enforced_by IN ('tool', 'nobody')
                            AND jsonb_typeof(answer -> 'lookup') = 'object'
                       THEN answer -> 'lookup' END;
        key_state := CASE WHEN s.enforced_by = 'ledger' THEN answer -> 'key_state' END;
        settled := NULL; why := NULL; result_hash := NULL;
        IF s.executions = 0 THEN
            -- approved while no worker waited for it: never handed out, so it never ran
            s.state := 'interrupted'; why := 'approved; no worker had taken it yet';
        ELSIF lookup IS NOT NULL THEN
            -- the tool said whether the key took effect: its answer settles the step and stays
            -- in the chain as evidence; "no answer" changes nothing
            IF lookup ->> 'answer' = 'completed' THEN
                s.state := 'done'; s.result := '{"settled_by_lookup":"completed"}';
                s.outcome_at := p_now; settled := 'completed';
            ELSIF lookup ->> 'answer' = 'absent' OR s.enforced_by = 'tool' THEN
                -- absent: it never ran; the tool's own key makes a re-execution safe anyway
                s.state := 'interrupted';
            ELSE
                s.state := 'unknown';
                why := 'the tool cannot tell whether it ran (enforced_by: nobody) and its lookup gave no answer';
            END IF;
        ELSIF s.effect = 'read' OR s.enforced_by = 'tool' THEN
            s.state := 'interrupted';
        ELSIF s.enforced_by = 'nobody' THEN
            s.state := 'unknown'; why := 'the tool cannot tell whether it ran (enforced_by: nobody)';
        ELSE
            settled := key_state ->> 'state';
            IF settled IN ('completed', 'failed') THEN
                s.state := CASE settled WHEN 'completed' THEN 'done' ELSE 'error' END;
                s.result := key_state -> 'response'; s.outcome_at := p_now;
            ELSIF settled = 'absent' OR NOT (key_state ->> 'stale')::boolean THEN
                -- absent: it never ran; fresh in_progress: a re-execution with the same key waits
                -- on the tool side's lock instead of running twice
                s.state := 'interrupted';
            ELSE
                s.state := 'unknown';
                why := 'the key is in progress with a stale lock: it may have been sent';
            END IF;
        END IF;
        event_type := CASE WHEN s.state IN ('done', 'error') THEN 'reconciled'
                           WHEN s.state = 'unknown' THEN 'step_unknown'
                           ELSE 'step_interrupted' END;
        IF event_type = 'reconciled' THEN  -- binds the copied result
            result_hash := CASE WHEN lookup IS NOT NULL
                THEN encode(sha256(convert_to('{"settled_by_lookup":"completed"}', 'UTF8')), 'hex')
                ELSE key_state ->> 'result_hash' END;
        END IF;
        UPDATE runs_step SET state = s.state, result = s.result, outcome_at = s.outcome_at
        WHERE id = s.id AND run_id = r.id AND journal_month = r.journal_month;
        r.event_seq := r.event_seq + 1;
        r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head,
            event_type,
            '{"idempotency_key":' || ledger_json(s.idempotency_key) || ',"index":' || s."index"
            || CASE WHEN settled IS NOT NULL THEN ',"key_state":' || ledger_json(settled) ELSE '' END
            || CASE WHEN lookup IS NOT NULL
                    THEN ',"lookup":{"answer":' || ledger_json(lookup ->> 'answer')
                         || ',"detail":' || ledger_json(lookup ->> 'detail')
                         || ',"source":' || ledger_json(lookup ->> 'source') || '}'
                    ELSE '' END
            || ',"name":' || ledger_json(s.name)
            || COALESCE(',"result_hash":"' || result_hash || '"', '')
            || CASE WHEN why IS NOT NULL THEN ',"why":' || ledger_json(why) ELSE '' END || '}',
            p_prefix, p_actor, p_now);
        IF s.state = 'unknown' THEN
            unknown := unknown || s."index";
        END IF;
    END LOOP;
    run := r;
END
$$;

-- POST /runs/{id}/lease: the grant, fencing every earlier holder with a new epoch. A lease
-- after an expired or interrupted holder (or a restart of the holder) applies the recovery rules
-- first and counts one recovery; a recovery that ends in review (an unknown step, the recovery
-- budget spent) or over budget is kept, with its new epoch, and refused. Code 'ask': the tool
-- side must be asked first (details: the steps), nothing changed.
CREATE OR REPLACE FUNCTION ledger_lease(
    p_run uuid, p_worker text, p_worker_json text, p_ttl integer,
    p_now timestamptz, p_actor text, p_prefix text, p_answers jsonb, p_lookup_tools text[],
    OUT code text, OUT details jsonb, OUT run runs_run
)
LANGUAGE plpgsql AS $$
DECLARE
    locked record;
    recovered record;
    r runs_run;
    limit_payload text;
    recovering boolean;
    previous text;
BEGIN
    locked := ledger_run_locked(p_run, NULL, true);
    IF locked.code IS NOT NULL THEN
        code := locked.code; details := locked.details; RETURN;
    END IF;
    r := locked.run;
    IF r.status = 'running' AND r.lease_worker IS NOT NULL AND r.lease_worker <> p_worker
       AND r.lease_expires_at IS NOT NULL AND r.lease_expires_at > p_now THEN
        code := 'lease_held';
        details := jsonb_build_object('worker', r.lease_worker, 'expires_at', ledger_iso(r.lease_expires_at));
        RETURN;
    END IF;
    recovering := r.status = 'interrupted' OR (r.status = 'running' AND r.lease_worker IS NOT NULL);
    IF recovering THEN
        details := ledger_recovery_questions(r, p_answers, p_lookup_tools);
        IF details IS NOT NULL THEN
            code := 'ask'; RETURN;
        END IF;
        recovered := ledger_recover_open_intents(r, p_answers, p_now, p_prefix, p_actor);
        r := recovered.run;
        IF cardinality(recovered.unknown) > 0 THEN
            r := ledger_needs_review(r, 'unknown_step', true,
                '{"epoch":' || (r.epoch + 1) || ',"reason":"unknown_step","steps":'
                || to_json(recovered.unknown)::text || '}', p_now, p_prefix, p_actor);
            run := ledger_run_save(r);
            code := 'needs_review'; details := jsonb_build_object('reason', r.status_reason);
            RETURN;
        END IF;
        r.used_recoveries := r.used_recoveries + 1;
        IF r.used_recoveries > r.limit_recoveries THEN
            r := ledger_needs_review(r, 'recoveries', true,
                '{"epoch":' || (r.epoch + 1) || ',"limit":"recoveries","limit_value":'
                || r.limit_recoveries || ',"reason":"recoveries","used":' || r.used_recoveries || '}',
                p_now, p_prefix, p_actor);
            run := ledger_run_save(r);
            code := 'needs_review';
            details := jsonb_build_object('limit', 'recoveries', 'limit_value', r.limit_recoveries,
                'used', r.used_recoveries);
            RETURN;
        END IF;
    END IF;
    limit_payload := ledger_exceeded_limit(r, p_now, false);
    IF limit_payload IS NOT NULL THEN
        r := ledger_run_budget_stop(r, limit_payload, p_now, p_prefix, p_actor);
        run := ledger_run_save(r);
        code := 'budget_exceeded'; details := limit_payload::jsonb;
        RETURN;
    END IF;
    previous := r.lease_worker;
    r.status := 'running'; r.status_reason := '';
    r.epoch := r.epoch + 1; r.leases_granted := r.leases_granted + 1;
    r.lease_worker := p_worker; r.lease_expires_at := p_now + make_interval(secs => p_ttl);
    r.lease_ttl_seconds := p_ttl;
    r.event_seq := r.event_seq + 1;
    r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head, 'lease_acquired',
        '{"epoch":' || r.epoch || ',"expires_at":"' || ledger_iso(r.lease_expires_at)
        || '","previous_worker":' || ledger_json(previous)
        || ',"recovery":' || recovering || ',"replayable_steps":' || r.step_count
        || ',"worker":' || p_worker_json || '}',
        p_prefix, p_actor, p_now);
    run := ledger_run_save(r);
    details := jsonb_build_object('recovered', recovering);
END
$$;

-- The reaper's work for one run whose lease expired: the recovery rules, a new epoch that
-- fences the lost worker, then interrupted (offered again) or needs_review. A run another
-- transaction holds is skipped (SKIP LOCKED: the next sweep takes it). Code 'not_expired':
-- nothing to do; 'ask': as ledger_lease.
CREATE OR REPLACE FUNCTION ledger_lease_expire(
    p_run uuid, p_now timestamptz, p_actor text, p_prefix text, p_answers jsonb,
    p_lookup_tools text[],
    OUT code text, OUT details jsonb, OUT run runs_run
)
LANGUAGE plpgsql AS $$
DECLARE
    recovered record;
    r runs_run;
    lost text;
BEGIN
    SELECT * INTO r FROM runs_run WHERE id = p_run FOR UPDATE SKIP LOCKED;
    IF NOT FOUND OR r.status <> 'running' OR r.lease_expires_at IS NULL
       OR r.lease_expires_at > p_now THEN
        code := 'not_expired'; RETURN;
    END IF;
    details := ledger_recovery_questions(r, p_answers, p_lookup_tools);
    IF details IS NOT NULL THEN
        code := 'ask'; RETURN;
    END IF;
    lost := r.lease_worker;
    recovered := ledger_recover_open_intents(r, p_answers, p_now, p_prefix, p_actor);
    r := recovered.run;
    r.epoch := r.epoch + 1;
    r.event_seq := r.event_seq + 1;
    r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head,
        'lease_expired',
        '{"at_step":' || r.step_count || ',"epoch":' || r.epoch || ',"worker":' || ledger_json(lost) || '}',
        p_prefix, p_actor, p_now);
    IF cardinality(recovered.unknown) > 0 THEN
        r := ledger_needs_review(r, 'unknown_step', false,
            '{"reason":"unknown_step","steps":' || to_json(recovered.unknown)::text || '}',
            p_now, p_prefix, p_actor);
    ELSE
        r.status := 'interrupted'; r.status_reason := 'lease_expired';
        r.lease_worker := NULL; r.lease_expires_at := NULL;
    END IF;
    run := ledger_run_save(r);
END
$$;

-- POST /runs/{id}/complete and /fail (p_to 'completed' or 'failed', p_value the output or the
-- error as canonical JSON): the same again answers the run as it is. A step still `intent` is
-- accounted for first: a write that may have run (its tool may be running right now) becomes
-- `unknown` and the run goes to review instead (code 'needs_review', kept; not fenced, so the
-- same worker asking again hears needs_review, not stale_epoch); a read, or a write approved but
-- never handed out, never had an effect: `interrupted`. Code 'not_running': a run that is not
-- running under this lease (pending, interrupted).
CREATE OR REPLACE FUNCTION ledger_run_finish(
    p_run uuid, p_epoch bigint, p_to text, p_value text,
    p_now timestamptz, p_actor text, p_prefix text,
    OUT code text, OUT details jsonb, OUT run runs_run
)
LANGUAGE plpgsql AS $$
DECLARE
    locked record;
    r runs_run;
    s runs_step;
    verb text := CASE p_to WHEN 'completed' THEN 'complete' ELSE 'fail' END;
    field text := CASE p_to WHEN 'completed' THEN 'output' ELSE 'error' END;
    why text;
    unknown integer[] := '{}';
BEGIN
    locked := ledger_run_locked(p_run, p_epoch, false);
    IF locked.code IS NOT NULL THEN
        code := locked.code; details := locked.details; RETURN;
    END IF;
    r := locked.run;
    IF r.status = p_to AND (CASE p_to WHEN 'completed' THEN r.output ELSE r.error END)
                           IS NOT DISTINCT FROM NULLIF(p_value::jsonb, 'null') THEN
        run := r; RETURN;
    END IF;
    IF r.status <> 'running' THEN
        SELECT f.code, f.details INTO code, details FROM ledger_status_refusal(r) f;
        IF code IS NULL THEN
            code := 'not_running'; details := jsonb_build_object('status', r.status);
        END IF;
        RETURN;
    END IF;
    FOR s IN SELECT * FROM runs_step
             WHERE run_id = r.id AND journal_month = r.journal_month AND state = 'intent'
             ORDER BY "index" FOR UPDATE
    LOOP
        IF s.effect = 'write' AND s.executions > 0 THEN
            s.state := 'unknown'; unknown := unknown || s."index";
            why := 'the worker asked to ' || verb || ' the run with this write still open: it may have been sent';
        ELSE
            s.state := 'interrupted';
            why := 'still open when the worker asked to ' || verb || ' the run';
        END IF;
        UPDATE runs_step SET state = s.state
        WHERE id = s.id AND run_id = r.id AND journal_month = r.journal_month;
        r.event_seq := r.event_seq + 1;
        r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head,
            CASE s.state WHEN 'unknown' THEN 'step_unknown' ELSE 'step_interrupted' END,
            '{"idempotency_key":' || ledger_json(s.idempotency_key) || ',"index":' || s."index"
            || ',"name":' || ledger_json(s.name) || ',"why":' || ledger_json(why) || '}',
            p_prefix, p_actor, p_now);
    END LOOP;
    IF cardinality(unknown) > 0 THEN
        -- the payload's keys in canonical order: error < finish < output < reason < steps
        r := ledger_needs_review(r, 'unknown_step', false,
            '{' || CASE field WHEN 'error' THEN '"error":' || p_value || ',' ELSE '' END
            || '"finish":"' || verb || '",'
            || CASE field WHEN 'output' THEN '"output":' || p_value || ',' ELSE '' END
            || '"reason":"unknown_step","steps":' || to_json(unknown)::text || '}',
            p_now, p_prefix, p_actor);
        run := ledger_run_save(r);
        code := 'needs_review';
        details := jsonb_build_object('reason', r.status_reason, 'steps', to_jsonb(unknown));
        RETURN;
    END IF;
    IF field = 'output' THEN  -- a JSON null is stored as SQL NULL, as Django stores None
        r.output := NULLIF(p_value::jsonb, 'null');
    ELSE
        r.error := NULLIF(p_value::jsonb, 'null');
    END IF;
    r.status := p_to; r.status_reason := ''; r.finished_at := p_now;
    r.lease_worker := NULL; r.lease_expires_at := NULL;
    r.event_seq := r.event_seq + 1;
    r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head,
        CASE p_to WHEN 'completed' THEN 'run_completed' ELSE 'run_failed' END,
        '{"' || field || '":' || p_value || '}', p_prefix, p_actor, p_now);
    run := ledger_run_save(r);
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

-- The rules of the run's team only, whatever teams the transaction may see.
DROP FUNCTION IF EXISTS ledger_approval_rule(text, text, uuid);
CREATE OR REPLACE FUNCTION ledger_approval_rule(p_agent text, p_name text, p_run uuid, p_team bigint)
RETURNS runs_approvalrule
LANGUAGE plpgsql STABLE AS $$
DECLARE
    rule runs_approvalrule;
BEGIN
    SELECT * INTO rule FROM runs_approvalrule ar
    WHERE ar.team_id = p_team AND ar.active AND (ar.agent = '' OR ar.agent = p_agent)
      AND p_name LIKE replace(replace(replace(replace(ar.tool_pattern, '\', '\\'), '%', '\%'),
                                              '_', '\_'), '*', '%')
    ORDER BY ar.approvals_required DESC, (ar.agent = '') ASC, ar.id
    LIMIT 1;
    IF rule.id IS NULL
       AND EXISTS (SELECT 1 FROM runs_forkfence f WHERE f.run_id = p_run AND f.tool = p_name) THEN
        SELECT * INTO rule FROM runs_approvalrule ar WHERE ar.is_fork_fence AND ar.team_id = p_team;
    END IF;
    RETURN rule;
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
        r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head, 'step_reopened',
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
    r.event_head := ledger_event_append(r.id, r.journal_month, r.team_id, r.event_seq, r.event_head, 'step_intent',
        p_intent_payload, p_prefix, p_actor, p_now);
    IF p_effect = 'write' AND NOT p_outcome THEN
        rule := ledger_approval_rule(r.agent, p_name, r.id, r.team_id);
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
    INSERT INTO runs_step (run_id, journal_month, team_id, "index", kind, name, effect, enforced_by, arguments,
        arguments_hash, idempotency_key, state, result, usage_input_tokens, usage_output_tokens,
        usage_cost_usd, epoch, intent_at, outcome_at, executions)
    VALUES (s.run_id, r.journal_month, r.team_id, s."index", s.kind, s.name, s.effect, s.enforced_by, s.arguments,
        s.arguments_hash, s.idempotency_key, s.state, s.result, s.usage_input_tokens,
        s.usage_output_tokens, s.usage_cost_usd, s.epoch, s.intent_at, s.outcome_at, s.executions)
    RETURNING * INTO s;  -- the row as stored (its id, and any column's database default)
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

-- POST /runs/{id}/steps/ with previous_outcome: the previous step's outcome, then the new intent,
-- in one transaction. Only a write enforced by its tool may have its outcome carried (recovery
-- re-runs such a step under its key; any other write keeps its own outcome call): any other step
-- answers code 'outcome_not_carried' and nothing is written. Answers one row, the outcome's,
-- when it is refused or stops the run at a budget (then committed, as the outcome call is), else
-- two: the outcome's, then the intent's.
CREATE OR REPLACE FUNCTION ledger_step_outcome_intent(
    p_run uuid, p_epoch bigint, p_index integer, p_kind text, p_name text, p_effect text,
    p_enforced_by text, p_arguments text, p_args_hash text, p_key text,
    p_now timestamptz, p_actor text, p_prefix text, p_intent_payload text, p_reopen_payload text,
    p_outcome boolean, p_ok boolean, p_result text, p_in bigint, p_out bigint, p_cost numeric,
    p_outcome_payload text,
    p_prev_index integer, p_prev_ok boolean, p_prev_result text, p_prev_in bigint,
    p_prev_out bigint, p_prev_cost numeric, p_prev_payload text
) RETURNS SETOF ledger_step_answer
LANGUAGE plpgsql AS $$
DECLARE
    prev record;
    a ledger_step_answer;
BEGIN
    SELECT s.effect, s.enforced_by INTO prev FROM runs_step s
    JOIN runs_run r ON r.id = s.run_id AND r.journal_month = s.journal_month
    WHERE s.run_id = p_run AND s."index" = p_prev_index;
    IF FOUND AND (prev.effect <> 'write' OR prev.enforced_by IS DISTINCT FROM 'tool') THEN
        a.code := 'outcome_not_carried';
        a.details := jsonb_build_object('index', p_prev_index, 'effect', prev.effect,
            'enforced_by', prev.enforced_by);
        RETURN NEXT a;
        RETURN;
    END IF;
    a := ledger_step_outcome(p_run, p_epoch, p_prev_index, p_prev_ok, p_prev_result,
        p_prev_in, p_prev_out, p_prev_cost, p_now, p_actor, p_prefix, p_prev_payload);
    RETURN NEXT a;
    IF a.code IS NOT NULL THEN
        RETURN;  -- refused (nothing written) or a budget stop (recorded)
    END IF;
    RETURN NEXT ledger_step_intent(p_run, p_epoch, p_index, p_kind, p_name, p_effect,
        p_enforced_by, p_arguments, p_args_hash, p_key, p_now, p_actor, p_prefix,
        p_intent_payload, p_reopen_payload, p_outcome, p_ok, p_result, p_in, p_out, p_cost,
        p_outcome_payload);
END
$$;

-- The triggers. On the partitioned runs_event each is cloned onto every partition, those made
-- later included.
DROP TRIGGER IF EXISTS runs_event_append_only ON runs_event;
CREATE TRIGGER runs_event_append_only
    BEFORE UPDATE OR DELETE ON runs_event
    FOR EACH ROW EXECUTE FUNCTION runs_event_append_only();

DROP TRIGGER IF EXISTS runs_event_continues_chain ON runs_event;
CREATE TRIGGER runs_event_continues_chain
    BEFORE INSERT ON runs_event
    FOR EACH ROW EXECUTE FUNCTION runs_event_continues_chain();

DROP TRIGGER IF EXISTS runs_run_status_guard ON runs_run;
CREATE TRIGGER runs_run_status_guard
    BEFORE UPDATE OF status ON runs_run
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION runs_run_status_guard();

-- on the partitioned runs_step, cloned onto every partition as the event triggers are
DROP TRIGGER IF EXISTS runs_step_state_guard ON runs_step;
CREATE TRIGGER runs_step_state_guard
    BEFORE UPDATE OF state ON runs_step
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION runs_step_state_guard();

-- Waiters (GET /api/v1/runs/{id}/?wait=N) hear of a run's status change through LISTEN/NOTIFY on
-- channel `ledger_run_status`, delivered at commit; the WHEN clause keeps the trigger off every
-- update that does not change the status (the hot journal calls: counters, heads, leases).
DROP TRIGGER IF EXISTS runs_run_status_notify ON runs_run;
CREATE TRIGGER runs_run_status_notify
    AFTER UPDATE OF status ON runs_run
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION runs_run_status_notify();
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0011_team")]

    operations = [migrations.RunSQL(SQL, migrations.RunSQL.noop)]
