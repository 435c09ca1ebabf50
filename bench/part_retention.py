"""Retention at scale: 1M runs / 20M events, old months dropped whole (issue 17, item 4).

    SECRET_KEY=dev .venv/bin/python -m bench.part_retention [--runs 1000000] [--events 20]

Makes its own database (BENCH_RETENTION_DB, default bench_part), migrates it, and generates with
SQL (generate_series, no Python per row): `--runs` runs spread evenly over the last 12 months
plus this one, `--steps` steps and `--events` events each, all completed and signed by one
checkpoint (leaves written directly: this measures the drop, not the signing); the chain trigger
and the foreign key checks are off while the bulk rows go in (session_replication_role), their
hashes are placeholders. Then, with valid chains (made by bench.testdata.runs_bulk_create),
`--held` runs in review and a tenth as many on legal hold in the old months, each with its first
step waiting for approval (a request and one approval). It runs the partition stage of retention
(audit.retention.retention_months_drop) with keep_days 183 (the retention floor), times it per month, checks that the
held runs were moved aside (their approvals too) and still verify and that the recent months
were not touched, writes bench/RETENTION.md and drops the database.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
DB = os.environ.get("BENCH_RETENTION_DB", "bench_part")
HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PORT = os.environ.get("BENCH_PG_PORT", "5432")
USER = os.environ.get("BENCH_PG_USER", "root")
URL = f"postgres://{USER}@{HOST}:{PORT}/{DB}"


def log(msg: str) -> None:
    print(f"[retention {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def admin(sql: str) -> None:
    with psycopg.connect(host=HOST, port=PORT, user=USER, dbname="postgres", autocommit=True) as c:
        c.execute(sql)  # type: ignore[arg-type]


RUNS_SQL = """
INSERT INTO runs_run (id, agent, input, status, status_reason, runner, limit_steps, limit_tokens,
    limit_wall_seconds, limit_recoveries, used_steps, used_tokens, used_cost_usd, used_recoveries,
    deadline, step_count, lease_ttl_seconds, leases_granted, epoch, event_seq, event_head,
    created_at, updated_at, finished_at, journal_month)
SELECT gen_random_uuid(), 'bench', '{}', 'completed', '', 'external', 50, 100000, 3600, 3,
    %(steps)s, 0, 0, 0, t + interval '1 hour', %(steps)s, 30, 1, 1, %(events)s, 'h', t, t,
    t + interval '1 minute', date_trunc('month', t AT TIME ZONE 'UTC')::date
FROM (SELECT %(start)s::timestamptz + (g * %(span)s::interval / %(n)s) AS t
      FROM generate_series(%(lo)s, %(hi)s - 1) g) s
"""

STEPS_SQL = """
INSERT INTO runs_step (run_id, journal_month, "index", kind, name, effect, arguments,
    arguments_hash, idempotency_key, state, usage_input_tokens, usage_output_tokens,
    usage_cost_usd, epoch, intent_at, outcome_at, executions)
SELECT r.id, r.journal_month, i, 'tool', 'kb.search', 'read', '{}', 'a', 'k', 'done', 0, 0, 0, 1,
    r.created_at, r.created_at, 1
FROM runs_run r, generate_series(0, %(steps)s - 1) i WHERE r.journal_month = %(month)s
"""

EVENTS_SQL = """
INSERT INTO runs_event (run_id, journal_month, seq, type, payload, actor, at, prev_hash, hash)
SELECT r.id, r.journal_month, s, 'step_done', '{}', 'worker:bench', r.created_at, 'p', 'h'
FROM runs_run r, generate_series(1, %(events)s) s WHERE r.journal_month = %(month)s
"""

APPROVALS_SQL = """
WITH requests AS (
    INSERT INTO runs_approvalrequest (run_id, journal_month, step_id, arguments_hash,
        approvals_required, requested_at, outcome)
    SELECT s.run_id, s.journal_month, s.id, s.arguments_hash, 2, s.intent_at, 'pending'
    FROM runs_step s WHERE s.run_id = ANY(%s::uuid[]) AND s."index" = 0
    RETURNING id, run_id, requested_at
)
INSERT INTO runs_approval (run_id, request_id, by, note, at)
SELECT run_id, id, 'bench', '', requested_at FROM requests
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--held", type=int, default=600)
    parser.add_argument("--keep-days", type=int, default=183)
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    parser.add_argument("--out", default=str(ROOT / "bench" / "RETENTION.md"))
    args = parser.parse_args(argv)

    admin(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{DB}"')
    env = {**os.environ, "DATABASE_URL": URL, "SECRET_KEY": os.environ.get("SECRET_KEY", "dev")}
    try:
        log(f"migrating {DB}")
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
        )
        os.environ.update(DATABASE_URL=URL, DJANGO_SETTINGS_MODULE="config.settings")
        os.environ.setdefault("SECRET_KEY", "dev")
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        figures = _run(args)
    finally:
        from django.db import connection

        connection.close()
        if not args.keep_db:
            admin(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
            log(f"dropped {DB}")
    _write(args, figures)
    return 0


def _months(start: datetime, months: int) -> list[Any]:
    out = []
    y, m = start.year, start.month
    for _ in range(months):
        out.append(datetime(y, m, 1, tzinfo=UTC).date())
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def _run(args: argparse.Namespace) -> dict[str, Any]:
    from django.db import connection

    from audit.models import Checkpoint, RetentionPolicy
    from audit.retention import journal_months, retention_months_drop
    from bench.testdata import runs_bulk_create
    from runs.chain import run_chain_breaks
    from runs.models import Run

    now = datetime.now(UTC)
    first = (now - timedelta(days=365)).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    span = now - first
    months = _months(first, 14)
    t_gen = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute("SELECT ledger_journal_partitions_ensure(%s, %s)", [months[0], months[-1]])
        # the bulk rows skip every trigger (the chain check, the foreign keys' checks)
        cur.execute("SET session_replication_role = replica")
        chunk = 100_000
        params: dict[str, Any] = {
            "steps": args.steps,
            "events": args.events,
            "start": first,
            "span": span,
            "n": args.runs,
        }
        for lo in range(0, args.runs, chunk):
            cur.execute(RUNS_SQL, params | {"lo": lo, "hi": min(lo + chunk, args.runs)})
        log(f"{args.runs} runs")
        for month in months:
            cur.execute(STEPS_SQL, {"steps": args.steps, "month": month})
            cur.execute(EVENTS_SQL, {"events": args.events, "month": month})
            log(f"month {month}: {cur.rowcount} events")
        cur.execute("SET session_replication_role = DEFAULT")
        # one checkpoint signs every bulk run's head (leaves written directly)
        cur.execute(
            "INSERT INTO audit_checkpoint (seq, created_at, prev_hash, hash, root, leaves, "
            "runs_verified, events_verified, key_id, statement, signature, created_by) VALUES "
            "(1, now(), '0', 'bench', 'r', 0, 0, 0, 'k', '{}', 's', 'bench') RETURNING id"
        )
        checkpoint_id = cur.fetchone()[0]
        cur.execute(
            "INSERT INTO audit_checkpointleaf (checkpoint_id, run_id, event_seq, head, position, "
            "path) SELECT %s, id, event_seq, event_head, row_number() OVER (), '' FROM runs_run",
            [checkpoint_id],
        )
    cutoff = now - timedelta(days=args.keep_days)
    old = [
        m
        for m in months
        if _months(datetime(m.year, m.month, 1, tzinfo=UTC), 2)[1] <= cutoff.date()
    ]
    held: list[Any] = []
    on_hold: list[Any] = []
    per = max(args.held // len(old), 1)
    for month in old:
        at = datetime(month.year, month.month, 10, tzinfo=UTC)
        held += runs_bulk_create(runs=per, steps_per_run=5, status="needs_review", created_at=at)
        hold = runs_bulk_create(runs=max(per // 10, 1), steps_per_run=5, created_at=at)
        on_hold += hold
    Run.objects.filter(pk__in=on_hold).update(legal_hold=True)
    with connection.cursor() as cur:
        # the held runs' first step waits for approval (one given): rows whose foreign key
        # points into the month's partition, so the drop must move them aside too (runs 0015)
        cur.execute(APPROVALS_SQL, [held + on_hold])
        cur.execute("ANALYZE")
        cur.execute("SELECT count(*) FROM runs_event")
        events_before = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM runs_step")
        steps_before = cur.fetchone()[0]
        cur.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        size_before = cur.fetchone()[0]
        cur.execute(
            "SELECT count(*), md5(string_agg(id::text || hash, ',' ORDER BY id)) FROM runs_event "
            "WHERE journal_month > %s",
            [old[-1]],
        )
        recent_before = cur.fetchone()
    runs_before = Run.objects.count()
    generated_s = time.perf_counter() - t_gen
    log(
        f"generated in {generated_s:.0f} s: {runs_before} runs, {events_before} events, {size_before}"
    )

    partitions_before = journal_months()
    policy = RetentionPolicy.objects.create(pk=1, enabled=True, keep_days=args.keep_days)
    checkpoint = Checkpoint.objects.get(seq=1)
    per_month: list[dict[str, Any]] = []
    mark = [time.perf_counter()]

    def on_month(month: Any, gone: int, kept: int) -> None:
        t = time.perf_counter()
        per_month.append(
            {
                "month": str(month),
                "runs_purged": gone,
                "runs_kept": kept,
                "seconds": round(t - mark[0], 2),
            }
        )
        log(f"dropped {month}: {gone} runs purged, {kept} kept, {t - mark[0]:.1f} s")
        mark[0] = t

    t0 = time.perf_counter()
    result = retention_months_drop(
        cutoff=cutoff, checkpoint=checkpoint, policy=policy, actor="system:bench", on_month=on_month
    )
    took = time.perf_counter() - t0
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs_event")
        events_after = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM runs_step")
        steps_after = cur.fetchone()[0]
        cur.execute(
            "SELECT count(*), md5(string_agg(id::text || hash, ',' ORDER BY id)) FROM runs_event "
            "WHERE journal_month > %s",
            [old[-1]],
        )
        recent_after = cur.fetchone()
        cur.execute("SELECT count(*) FROM runs_event_keep")
        keep_events = cur.fetchone()[0]
        cur.execute(
            "SELECT count(*) FROM runs_approvalrequest r JOIN runs_approval a "
            "ON a.run_id = r.run_id AND a.request_id = r.id"
        )
        approvals_after = cur.fetchone()[0]
    kept_runs = Run.objects.filter(pk__in=held + on_hold)
    t_verify = time.perf_counter()
    broken = sum(1 for run in kept_runs if run_chain_breaks(run))
    verify_s = time.perf_counter() - t_verify
    dropped_events = events_before - events_after
    figures = {
        "runs": runs_before,
        "events": events_before,
        "steps": steps_before,
        "database_size_before": size_before,
        "generated_seconds": round(generated_s, 1),
        "keep_days": args.keep_days,
        "partitions_before": [str(m) for m in partitions_before],
        "months_dropped": [str(m) for m in result.months_dropped],
        "partitions_after": [str(m) for m in journal_months()],
        "runs_purged": result.purged,
        "runs_kept_back": result.kept,
        "runs_held_in_review": len(held),
        "runs_on_legal_hold": len(on_hold),
        "held_runs_still_there": kept_runs.count(),
        "held_runs_with_chain_breaks": broken,
        "held_runs_verify_seconds": round(verify_s, 2),
        "held_runs_approvals_kept": approvals_after,
        "events_in_keep_partition": keep_events,
        "events_dropped": dropped_events,
        "steps_dropped": steps_before - steps_after,
        "recent_months_untouched": list(recent_before) == list(recent_after),
        "recent_events": recent_after[0],
        "retention_seconds": round(took, 2),
        "seconds_per_million_events_dropped": round(took / (dropped_events / 1e6), 2)
        if dropped_events
        else None,
        "per_month": per_month,
        "load": os.getloadavg(),
        "at": now.isoformat(timespec="seconds"),
    }
    log(json.dumps(figures, indent=1))
    return figures


def _write(args: argparse.Namespace, f: dict[str, Any]) -> None:
    rows = "\n".join(
        f"| {m['month']} | {m['runs_purged']:,} | {m['runs_kept']:,} | {m['seconds']} |"
        for m in f["per_month"]
    )
    text = f"""# Retention by partitions: {f["runs"]:,} runs / {f["events"]:,} events

`python -m bench.part_retention` ({f["at"]}; PostgreSQL on this machine, 2 shared cores, load
{f["load"][0]:.1f} / {f["load"][1]:.1f} / {f["load"][2]:.1f} when it ended). The data: {f["runs"]:,}
runs spread over 13 months, {f["steps"]:,} steps, {f["events"]:,} events ({f["database_size_before"]}),
generated in {f["generated_seconds"]} s with SQL; {f["runs_held_in_review"]} runs in review and
{f["runs_on_legal_hold"]} on legal hold in the old months (valid chains). Policy: keep
{f["keep_days"]} days. Measured: `audit.retention.retention_months_drop` (the checkpoint that
signs the heads is made beforehand and not timed).

| | |
|---|---|
| months dropped (partitions of runs_step and runs_event detached and dropped) | {len(f["months_dropped"])}: {", ".join(f["months_dropped"])} |
| runs purged | {f["runs_purged"]:,} |
| events / steps dropped | {f["events_dropped"]:,} / {f["steps_dropped"]:,} |
| runs kept back (moved to the keep partitions) | {f["runs_kept_back"]:,}; all {f["held_runs_still_there"]} held runs there, {f["held_runs_with_chain_breaks"]} with a chain break |
| held runs' approval requests (with an approval each) kept through the move | {f["held_runs_approvals_kept"]:,} of {f["runs_held_in_review"] + f["runs_on_legal_hold"]:,} |
| recent months untouched (count and digest of their events equal) | {f["recent_months_untouched"]} ({f["recent_events"]:,} events) |
| **retention time** | **{f["retention_seconds"]} s** |
| **per million events dropped** | **{f["seconds_per_million_events_dropped"]} s** |

| month | runs purged | runs kept back | seconds |
|---|---|---|---|
{rows}

Each month is one transaction: lock the month's purgeable runs, detach both partitions, copy the
kept runs' rows into the keep partitions, drop the detached tables, delete the purged runs' rows
from runs_run (row by row: one row per run, not per event) and write the tombstones. Journal
writes wait for the detach's lock until that transaction commits.
"""
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(f, indent=1) + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(main())
