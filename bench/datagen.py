"""Bulk journal data with valid hash chains, fast: COPY text built by hand, one pass per batch.

    python -m bench.datagen --runs 100000 [--steps 20] [--unknown 5000] [--teams 10]

Runs, steps and events are written with PostgreSQL COPY; every event hash is computed exactly
as the kernel's `ledger_event_append` does (`runs.canonical.event_body` and `event_hash`, as the verifiers recompute it), so `verify_journal` and exports
verify. `--unknown N` makes N runs `needs_review` with their last step `unknown` (the review
queue). `--light` writes 1-step runs (the runs beyond 100k of the scaling curve's 1M tier).
The generator tops up: it appends runs to whatever is there. `--teams N` spreads the runs over N
teams, round robin: `default` and `bench-team-02` .. `bench-team-NN` (made when missing); every
row carries its run's team, as the journal's keys require.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.common import BENCH_DB, PG_HOST, PG_PORT, PG_USER
from runs.canonical import event_body, event_hash

GENESIS = "0" * 64
RUN_KEYS = (
    "id", "agent", "external_id", "input", "output", "error", "status", "status_reason",
    "limit_steps", "limit_tokens", "limit_cost_usd", "limit_wall_seconds", "limit_recoveries",
    "used_steps", "used_tokens", "used_cost_usd", "used_recoveries", "deadline", "step_count",
    "lease_worker", "lease_expires_at", "lease_ttl_seconds", "leases_granted", "epoch",
    "event_seq", "event_head", "created_at", "updated_at", "finished_at", "policy_id",
)  # fmt: skip
EVENT_KEYS = ("run_id", "seq", "type", "payload", "actor", "at", "prev_hash", "hash")
STEP_KEYS = (
    "run_id", "index", "kind", "name", "effect", "enforced_by", "arguments", "arguments_hash",
    "idempotency_key", "state", "result", "usage_input_tokens", "usage_output_tokens",
    "usage_cost_usd", "epoch", "intent_at", "outcome_at", "executions",
)  # fmt: skip
N = "\\N"


def _layout(model_label: str, supplied: set[str]) -> tuple[str, str, list[tuple[str, str | None]]]:
    """The table, its COPY column list and, per column, None (the generator gives the value) or
    a constant: read from the model's metadata, so a column added by a migration is either
    filled by its default or named here, never silently missing from the generated data."""
    django_ready()
    from django.apps import apps

    model = apps.get_model(model_label)
    layout: list[tuple[str, str | None]] = []
    for f in model._meta.concrete_fields:
        column = str(f.column)
        if column in supplied:
            layout.append((column, None))
        elif getattr(f, "db_returning", False) or f.has_db_default():
            continue  # a sequence or a database default fills it
        elif f.has_default():
            value = f.get_prep_value(f.get_default())
            layout.append((column, N if value is None else _copy_text(_plain(value))))
        elif not f.null:
            raise RuntimeError(
                f"bench.datagen gives no value for {model._meta.db_table}.{column} (NOT NULL, "
                "no default): add it to the rows the generator writes"
            )
    table = str(model._meta.db_table)
    return table, ", ".join(c for c, _ in layout), layout


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, dict | list):
        return _canon(value)
    return str(value)


def _line(layout: list[tuple[str, str | None]], row: dict[str, str]) -> str:
    return "\t".join(row[c] if constant is None else constant for c, constant in layout) + "\n"


def django_ready() -> None:
    """Django set up for its model metadata only (this process never queries through it)."""
    from django.apps import apps

    if not apps.ready:
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        # no SECRET_KEY is needed to read metadata; the bench's own processes never see this
        saved = os.environ.get("INTENTLEDGER_ALLOW_INSECURE_KEY")
        os.environ["INTENTLEDGER_ALLOW_INSECURE_KEY"] = "1"
        try:
            django.setup()
        finally:
            if saved is None:
                del os.environ["INTENTLEDGER_ALLOW_INSECURE_KEY"]
            else:
                os.environ["INTENTLEDGER_ALLOW_INSECURE_KEY"] = saved


AGENTS = ["support", "triage", "billing", "research"]
TOOLS_READ = ["kb.search", "tickets.search", "model.chat"]
TOOLS_WRITE = ["tickets.create", "email.send", "tickets.comment", "tickets.close"]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _copy_text(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


class _Chain:
    __slots__ = ("events", "head", "run", "seq")

    def __init__(self, run: str, events: list[dict[str, str]]) -> None:
        self.run = run
        self.seq = 0
        self.head = GENESIS
        self.events = events

    def add(self, type_: str, payload: dict[str, Any], actor: str, at: datetime) -> None:
        self.seq += 1
        at_iso = at.isoformat()
        body = event_body(
            run_id=self.run, seq=self.seq, type=type_, payload=payload, actor=actor, at=at_iso
        )
        digest = event_hash(prev_hash=self.head, body=body)
        self.events.append(
            dict(
                zip(
                    EVENT_KEYS,
                    (self.run, str(self.seq), type_, _copy_text(_canon(payload)), actor, at_iso,
                     self.head, digest),
                    strict=True,
                )
            )
        )  # fmt: skip
        self.head = digest


def bench_teams(conn: psycopg.Connection[Any], count: int) -> list[int]:
    """The ids of `count` teams: `default`, then bench-team-02 .. (made when missing)."""
    slugs = ["default", *(f"bench-team-{n:02d}" for n in range(2, count + 1))]
    for slug in slugs[1:]:
        conn.execute(
            "INSERT INTO teams_team (slug, name, created_at, escalation_email)"
            " VALUES (%s, %s, now(), '')"
            " ON CONFLICT (slug) DO NOTHING",
            (slug, slug.replace("-", " ").title()),
        )
    rows = conn.execute("SELECT slug, id FROM teams_team WHERE slug = ANY(%s)", (slugs,))
    ids = dict(rows.fetchall())
    return [int(ids[slug]) for slug in slugs]


def _run(
    i: int,
    *,
    team_id: int,
    steps: int,
    status: str,
    created_at: datetime,
    runs_out: list[dict[str, str]],
    steps_out: list[dict[str, str]],
    events_out: list[dict[str, str]],
) -> None:
    run_id = str(uuid.uuid4())
    agent = AGENTS[i % len(AGENTS)]
    # steps and events live in their run's month partition (runs.models.journal_month_now)
    month = created_at.astimezone(UTC).date().replace(day=1).isoformat()
    first_step, first_event = len(steps_out), len(events_out)
    chain = _Chain(run_id, events_out)
    worker = f"worker-{i % 17}"
    actor = f"worker:{worker}"
    chain.add(
        "run_created",
        {"agent": agent, "external_id": f"ticket-{i}", "policy": None, "limits": {"steps": 50}},
        actor,
        created_at,
    )
    chain.add(
        "lease_acquired", {"worker": worker, "epoch": 1, "recovered": False}, actor, created_at
    )
    t = created_at
    tokens = 0
    unknown_at = steps - 1 if status == "needs_review" else -1
    for index in range(steps):
        t += timedelta(milliseconds=211)
        write = index % 4 == 3 or index == unknown_at
        name = (TOOLS_WRITE if write else TOOLS_READ)[index % (4 if write else 3)]
        args = {"customer": f"c{i}@example.com", "query": f"order {i} step {index}"}
        args_json = _canon(args)
        ahash = hashlib.sha256(args_json.encode()).hexdigest()
        key = f"{run_id}:{index}:{name}:{ahash[:32]}"
        enforced = ("nobody" if index == unknown_at else "ledger") if write else None
        chain.add(
            "step_intent",
            {
                "index": index,
                "kind": "tool",
                "name": name,
                "effect": "write" if write else "read",
                "enforced_by": enforced,
                "arguments_hash": ahash,
                "idempotency_key": key,
            },
            actor,
            t,
        )
        if index == unknown_at:
            chain.add(
                "step_unknown",
                {
                    "index": index,
                    "name": name,
                    "idempotency_key": key,
                    "why": "enforced_by: nobody",
                },
                "system:reaper",
                t + timedelta(seconds=31),
            )
            steps_out.append(
                dict(
                    zip(
                        STEP_KEYS,
                        (run_id, str(index), "tool", name, "write", "nobody", args_json, ahash,
                         key, "unknown", N, "0", "0", "0", "1", t.isoformat(), N, "1"),
                        strict=True,
                    )
                )
            )  # fmt: skip
            continue
        result = (
            {"ticket": {"id": i * 100 + index, "status": "open"}}
            if write
            else {"articles": [{"id": index, "title": "Refunds"}]}
        )
        result_json = _canon(result)
        usage_in, usage_out = 150 + index, 30 + index
        tokens += usage_in + usage_out
        done_at = t + timedelta(milliseconds=90)
        chain.add(
            "step_done",
            {
                "index": index,
                "name": name,
                "result_hash": hashlib.sha256(result_json.encode()).hexdigest(),
                "usage": {
                    "input_tokens": usage_in,
                    "output_tokens": usage_out,
                    "cost_usd": "0.000100",
                },
            },
            actor,
            done_at,
        )
        steps_out.append(
            dict(
                zip(
                    STEP_KEYS,
                    (run_id, str(index), "tool", name, "write" if write else "read",
                     enforced or N, args_json, ahash, key, "done", result_json, str(usage_in),
                     str(usage_out), "0.000100", "1", t.isoformat(), done_at.isoformat(), "1"),
                    strict=True,
                )
            )
        )  # fmt: skip
    finished = t + timedelta(seconds=1)
    final = status in ("completed", "failed", "budget_exceeded")
    output = N
    error = N
    reason = ""
    if status == "completed":
        output = '{"resolved":true}'
        chain.add("run_completed", {"output": {"resolved": True}}, actor, finished)
    elif status == "failed":
        error = '{"why":"tool error"}'
        chain.add("run_failed", {"error": {"why": "tool error"}}, actor, finished)
    elif status == "budget_exceeded":
        reason = "tokens"
        chain.add("budget_exceeded", {"limit": "tokens"}, "system", finished)
    elif status == "needs_review":
        reason = "unknown_step"
        chain.add(
            "needs_review",
            {"reason": "unknown_step", "steps": [unknown_at]},
            "system:reaper",
            finished,
        )
    lease_worker = worker if status == "running" else N
    lease_exp = (finished + timedelta(days=365)).isoformat() if status == "running" else N
    runs_out.append(
        {
            "id": run_id,
            "team_id": str(team_id),
            "agent": agent,
            "external_id": f"ticket-{i}",
            "input": f'{{"customer":"customer-{i}@example.com","ticket":{i}}}',
            "output": output,
            "error": error,
            "status": status,
            "status_reason": reason,
            "limit_steps": "50",
            "limit_tokens": "1000000",
            "limit_cost_usd": N,
            "limit_wall_seconds": "86400",
            "limit_recoveries": "5",
            "used_steps": str(steps),
            "used_tokens": str(tokens),
            "used_cost_usd": f"{steps * 0.0001:.6f}",
            "used_recoveries": "0",
            "deadline": (created_at + timedelta(days=1)).isoformat(),
            "step_count": str(steps),
            "lease_worker": lease_worker,
            "lease_expires_at": lease_exp,
            "lease_ttl_seconds": "30",
            "leases_granted": "1",
            "epoch": "1",
            "event_seq": str(chain.seq),
            "event_head": chain.head,
            "created_at": created_at.isoformat(),
            "updated_at": finished.isoformat(),
            "finished_at": finished.isoformat() if final else N,
            "policy_id": N,
            "journal_month": month,
        }
    )
    for row in steps_out[first_step:] + events_out[first_event:]:
        row["journal_month"] = month
        row["team_id"] = str(team_id)


def _status(i: int, unknown_every: int) -> str:
    if unknown_every and i % unknown_every == unknown_every - 1:
        return "needs_review"
    r = i % 100
    return (
        "failed" if r < 5 else "budget_exceeded" if r < 6 else "running" if r < 7 else "completed"
    )


def generate(
    *,
    runs: int,
    steps: int = 20,
    unknown: int = 0,
    start_index: int = 0,
    batch: int = 2000,
    teams: int = 1,
) -> dict[str, Any]:
    """Append `runs` runs over `teams` teams (run i in team i mod teams); returns counts and
    seconds. `unknown` of them end needs_review."""
    t0 = time.perf_counter()
    unknown_every = runs // unknown if unknown else 0
    now = datetime.now(UTC).replace(microsecond=0)
    span = timedelta(days=30)
    made_unknown = 0
    counts = {"runs": 0, "steps": 0, "events": 0}
    layouts = [
        # each row also carries its run's journal_month (the partition key) and team, set in _run
        _layout("runs.Run", set(RUN_KEYS) | {"journal_month", "team_id"}),
        _layout("runs.Step", set(STEP_KEYS) | {"journal_month", "team_id"}),
        _layout("runs.Event", set(EVENT_KEYS) | {"journal_month", "team_id"}),
    ]
    with psycopg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=BENCH_DB) as conn:
        # consistency is by construction here: skip the per-row FK trigger checks (superuser
        # only; without the privilege the checks simply run)
        try:
            conn.execute("SET session_replication_role = replica")
        except psycopg.errors.InsufficientPrivilege:
            conn.rollback()
        conn.execute("SET synchronous_commit = off")
        team_ids = bench_teams(conn, teams)
        conn.commit()
        for first in range(0, runs, batch):
            runs_out: list[dict[str, str]] = []
            steps_out: list[dict[str, str]] = []
            events_out: list[dict[str, str]] = []
            for j in range(first, min(first + batch, runs)):
                i = start_index + j
                status = _status(j, unknown_every)
                if status == "needs_review":
                    if made_unknown >= unknown:
                        status = "completed"
                    else:
                        made_unknown += 1
                created = now - span + span * ((i * 7919) % 1_000_003) / 1_000_003
                created += timedelta(microseconds=i % 999_983)
                _run(
                    i,
                    team_id=team_ids[i % len(team_ids)],
                    steps=steps,
                    status=status,
                    created_at=created,
                    runs_out=runs_out,
                    steps_out=steps_out,
                    events_out=events_out,
                )
            with conn.cursor() as cur:
                for (table, cols, layout), rows in zip(
                    layouts, (runs_out, steps_out, events_out), strict=True
                ):
                    with cur.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                        for k in range(0, len(rows), 5000):
                            copy.write("".join(_line(layout, row) for row in rows[k : k + 5000]))
                    counts[table.split("_")[1] + "s"] = counts.get(
                        table.split("_")[1] + "s", 0
                    ) + len(rows)
            conn.commit()
        conn.execute("ANALYZE runs_run")
        conn.execute("ANALYZE runs_step")
        conn.execute("ANALYZE runs_event")
        conn.commit()
    return {
        "runs": counts.get("runs", 0),
        "steps": counts.get("steps", 0),
        "events": counts.get("events", 0),
        "unknown": made_unknown,
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.datagen", description=__doc__)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--unknown", type=int, default=0)
    parser.add_argument("--start-index", type=int, default=0)
    parser.add_argument("--teams", type=int, default=1, help="spread the runs over N teams")
    args = parser.parse_args()
    print(
        json.dumps(
            generate(
                runs=args.runs,
                steps=args.steps,
                unknown=args.unknown,
                start_index=args.start_index,
                teams=args.teams,
            )
        )
    )


if __name__ == "__main__":
    main()
