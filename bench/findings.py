"""The "what the numbers say" section of RESULTS.md, computed from this invocation's figures."""

from __future__ import annotations

import os
from typing import Any

from bench.results import Results


def _p50(results: Results, name: str) -> float | None:
    fig = results.figures.get(name)
    return fig.p50 if fig is not None and fig.all else None


def findings(results: Results) -> str:
    lines: list[str] = []
    load_end = results.extra.get("loadavg_at_end") or [round(x, 2) for x in os.getloadavg()]
    load_start = results.extra.get("machine", {}).get("loadavg_at_start")
    lines.append(
        f"- **Machine load.** Load average {load_start} at the start and {load_end} at the end on "
        "2 cores: other work (test suites of the other parts) shared the CPUs during this run. "
        "Every absolute time below carries that; the ratios against the raw INSERT and the "
        "libraries, measured in the same minutes, carry less of it."
    )
    write = _p50(results, "ledger write step (intent + outcome) 100B")
    read = _p50(results, "ledger read step (one call) 100B")
    dbos = _p50(results, "DBOS step 100B")
    lang = _p50(results, "LangGraph node (durability=sync) 100B")
    raw = _p50(results, "raw fsync'd INSERT 100B")
    if write and read:
        parts = [f"write step {write:.1f} ms, read step {read:.1f} ms p50 (100 B)"]
        if dbos:
            parts.append(f"DBOS {dbos:.1f} ms per step (write ÷ DBOS {write / dbos:.1f}×)")
        if lang:
            parts.append(f"LangGraph {lang:.1f} ms per node (read ÷ LangGraph {read / lang:.1f}×)")
        if raw:
            parts.append(f"one fsync'd INSERT {raw:.2f} ms")
        lines.append(
            "- **Per step.** " + "; ".join(parts) + ". Targets: write ≤ 4 ms, read ≤ 2 ms: "
            f"missed by {write / 4:.1f}× and {read / 2:.1f}×. The libraries run in the agent's "
            "process; the ledger pays an HTTP request, a Django/DRF request cycle and its own "
            "transaction per call on top of the same fsync."
        )
    sql: dict[str, Any] = results.extra.get("sql_per_call", {})
    if sql:
        trips = ", ".join(f"{name} {v['round_trips']}" for name, v in sql.items())
        lines.append(
            f"- **Round trips per call** (wire count): {trips}. Each call is one transaction "
            "(BEGIN … COMMIT, one fsync) but 8–10 round trips: a connection health check "
            "(`SELECT 1`, `conn_health_checks`), the token lookup, BEGIN, the run lock "
            "(`SELECT … FOR UPDATE`), INSERT step, INSERT event(s), UPDATE run, COMMIT."
        )
    cpu = _p50(results, "server CPU per step, 8 concurrent runs")
    tput = _p50(results, "throughput, 8 concurrent runs")
    if cpu and tput:
        lines.append(
            f"- **Throughput is CPU-bound in the web process.** {cpu:.1f} ms of gunicorn CPU per "
            f"step (a step is 1.5 calls on average here): two cores can give at most "
            f"~{2000 / cpu:.0f} steps/s to gunicorn alone, before PostgreSQL and the load "
            f"generator take their share; measured {tput:.0f} steps/s with 8 runs. ≥ 500 steps/s "
            f"needs ≤ ~2 ms of server CPU per step."
        )
    profiles = results.extra.get("profiles", {})
    if profiles:
        for kind, data in profiles.items():
            b = data.get("buckets", {})
            lines.append(
                f"- **Profile ({kind} steps, py-spy).** Of the worker's on-CPU samples: "
                f"services {100 * (b.get('  step_intent_record', 0) + b.get('  step_outcome_record', 0)):.0f}% "
                f"(of which Model.save {100 * b.get('  Model.save', 0):.0f}%, run lock "
                f"{100 * b.get('  run_for_update (SELECT … FOR UPDATE)', 0):.0f}%), ORM SQL "
                f"compilation {100 * b.get('Django ORM SQL compilation', 0):.0f}%, psycopg execution "
                f"{100 * b.get('all SQL execution (psycopg)', 0):.0f}%, token authentication "
                f"{100 * b.get('  token authentication', 0):.0f}%, serializers "
                f"{100 * b.get('  input validation (serializers)', 0):.0f}%; the rest is the "
                "Django/DRF/gunicorn request cycle (middleware, routing, response)."
            )
    lease = _p50(results, "lease+journal call, 20 steps × ~10 KB (recovery)")
    restart = _p50(results, "whole restart: process start → step 13 executing")
    if lease:
        lines.append(
            f"- **Recovery.** lease+journal {lease:.1f} ms p50 (target ≤ 15 ms): it returns "
            f"~{results.extra.get('lease_response_bytes', 0) / 1024:.0f} KiB of journal, so JSON "
            "encoding of the 20 × 10 KB results is a large part of it."
            + (
                f" The whole restart through the SDK takes {restart:.0f} ms (target < 500 ms): "
                "interpreter start, `import agentledger` (httpx only), the lease and 13 replayed "
                "steps."
                if restart
                else ""
            )
        )
    dbos_restart = _p50(results, "DBOS restart: process start → step 13 executing")
    lang_restart = _p50(results, "LangGraph restart: process start → step 13 executing")
    if restart and (dbos_restart or lang_restart):
        lines.append(
            "- **Restart beside the libraries** (same story, same machine, same minutes): "
            + ", ".join(
                f"{name} {value:.0f} ms ({value / restart:.1f}× the SDK's)"
                for name, value in (("DBOS", dbos_restart), ("LangGraph", lang_restart))
                if value
            )
            + "; most of theirs is importing the library."
        )
    by_tier = results.extra.get("explain_by_tier", {})
    if by_tier:
        tiers = sorted(by_tier, key=int)
        first, last = by_tier[tiers[0]], by_tier[tiers[-1]]
        flat = [t for t in first if t in last and last[t][1] <= first[t][1] * 2 + 8]
        grown = [t for t in first if t in last and t not in flat]
        writes = [
            (t, _p50(results, f"write step at {int(t):,} runs"))
            for t in tiers
            if _p50(results, f"write step at {int(t):,} runs")
        ]
        per_step = [
            "lock the run (every worker write)",
            "lock a step (outcome)",
            "open intents at recovery (lease)",
        ]
        hot_flat = all(t in flat for t in per_step if t in first)
        seq = [
            part.split("**")[1]
            for part in results.extra.get("explain", [])
            if "Seq Scan" in part and part.startswith("**")
        ]
        lines.append(
            f"- **Scaling.** From {int(tiers[0]):,} to {int(tiers[-1]):,} runs, "
            f"{len(flat)} of {len(first)} hot queries touch about as many buffers"
            + (
                "; the per-step ones (run lock, step lock, open intents) are among them"
                if hot_flat
                else "; **a per-step query grows**"
            )
            + (
                "; more buffers at the top tier: "
                + ", ".join(f"{t} ({first[t][1]} → {last[t][1]})" for t in grown)
                if grown
                else ""
            )
            + (
                f"; sequential scans in the top tier's plans: {', '.join(seq)}"
                if seq
                else "; no sequential scan in the top tier's plans"
            )
            + ". End-to-end write step p50 per tier: "
            + ", ".join(f"{int(t):,}: {v:.1f} ms" for t, v in writes)
            + " (compare the raw INSERT of each tier in the scaling table: the machine's load "
            "moved between tiers)."
        )
    lines += [
        "",
        "**What would close the per-step and throughput gaps** (in order of expected effect):",
        "",
        "1. One round trip per worker call: do the lock, step insert, event append and run "
        "update in one SQL statement (a PL/pgSQL function or a single CTE) instead of 5–7 ORM "
        "statements; the hash chain can stay in Python (computed before the call from the "
        "run's head, with the head checked in the same statement).",
        "2. Drop the per-request `SELECT 1` health check (`conn_health_checks`) on the worker "
        "API and cache token lookups for a second (revocation then takes ≤ 1 s).",
        "3. A lean path for the two hot endpoints (plain Django views with `json.loads` and "
        "hand-built responses, no DRF request/serializer machinery), keeping DRF for the rest.",
        "4. Drop two redundant indexes: `runs_step(run_id)` and `runs_event(run_id)` (the "
        "foreign keys' automatic indexes) are prefixes of the unique `(run_id, index)` and "
        "`(run_id, seq)` indexes; every step row and event row pays one index insertion more "
        "than it needs (the EXPLAINs below pick the FK indexes, but the unique ones serve the same "
        "`WHERE run_id = … ORDER BY index/seq` lookups, already in order).",
        "5. More CPU for the web tier: on this 2-core box the load generator, PostgreSQL and "
        "gunicorn compete; the throughput target assumes the web process has the cores.",
        "",
        'Already done in this round (commit "runs: smaller hot-path writes"): a read step '
        "recorded in one call is one INSERT instead of INSERT + UPDATE, and step calls save only "
        "the run/step columns they change.",
    ]
    return "\n".join(lines)
