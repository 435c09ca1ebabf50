"""Parts 5 and 6: the dashboard and export on a big journal, and the scaling curve.

One pass grows the bench database through the tiers (1k, 10k, 100k, 1M runs): at each tier
the per-step overhead and the lease+journal call are measured (the curve must stay flat); at
the dataset tier (100,000 runs, 2,000,000 steps, 5,000 unknown) the dashboard pages and the
bulk export are measured. Runs beyond 100k are finished runs without steps (created, completed:
their chains have 3 events), so the 1M tier stays generatable in minutes; the runs and events
tables hold 1M runs and ~6.9M events, the steps table the 2M steps of the 100k tier.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import psutil

from bench import datagen, stack
from bench.client import JournalDriver
from bench.common import BENCH_DB, Figure, payload_of
from bench.context import Ctx
from bench.part_recovery import prepare_run

HOT_QUERIES = {
    "lock the run (every worker write)": "SELECT * FROM runs_run WHERE id = %(run)s FOR UPDATE",
    "lock a step (outcome)": "SELECT * FROM runs_step WHERE run_id = %(run)s AND index = 5 FOR UPDATE",
    "open intents at recovery (lease)": "SELECT * FROM runs_step WHERE run_id = %(run)s AND state = 'intent' ORDER BY index",
    "journal steps (lease, GET journal)": "SELECT * FROM runs_step WHERE run_id = %(run)s ORDER BY index",
    "journal events (GET journal, transcript)": "SELECT * FROM runs_event WHERE run_id = %(run)s ORDER BY seq",
    "runs list, newest first": "SELECT * FROM runs_run ORDER BY created_at DESC LIMIT 50",
    "runs list filtered by status": "SELECT * FROM runs_run WHERE status = 'failed' ORDER BY created_at DESC LIMIT 50",
    "review queue, oldest first": "SELECT * FROM runs_step WHERE state = 'unknown' ORDER BY intent_at LIMIT 50",
    "capped count of one status (runs list header, review.selectors)": "SELECT count(*) FROM (SELECT id FROM runs_run WHERE status = 'completed' LIMIT 10001) AS capped",
    "lease reaper scan": "SELECT id FROM runs_run WHERE status = 'running' AND lease_expires_at < now() ORDER BY lease_expires_at LIMIT 500",
}


def _count_runs() -> int:
    with stack.admin_connect(BENCH_DB) as conn:
        row = conn.execute("SELECT count(*) FROM runs_run").fetchone()
        return int(row[0]) if row else 0


def _step_overhead(
    driver: JournalDriver, reps: int, runs: int
) -> tuple[list[list[float]], list[list[float]]]:
    payload = payload_of(100)
    writes, reads = [], []
    for _ in range(reps):
        w, r = [], []
        for _ in range(runs):
            run_id = driver.create(agent="bench-scale")
            epoch = driver.lease(run_id)["epoch"]
            for i in range(0, 20, 2):
                t0 = time.perf_counter()
                driver.write_intent(run_id, epoch, i, {"i": i})
                driver.outcome(run_id, epoch, i, payload)
                t1 = time.perf_counter()
                driver.read_step(run_id, epoch, i + 1, {"i": i}, payload)
                t2 = time.perf_counter()
                w.append((t1 - t0) * 1000)
                r.append((t2 - t1) * 1000)
            driver.complete(run_id, epoch)
        writes.append(w)
        reads.append(r)
    return writes, reads


def _lease_journal(driver: JournalDriver, reps: int, per_rep: int) -> list[list[float]]:
    out = []
    for _ in range(reps):
        run_id = prepare_run(driver)
        samples = []
        for _ in range(per_rep):
            t0 = time.perf_counter()
            driver.lease(run_id, worker="bench-holder")
            samples.append((time.perf_counter() - t0) * 1000)
        out.append(samples)
    return out


def run(ctx: Ctx, workers: int, threads: int, *, scaling: bool, dashboard: bool) -> None:
    res = ctx.results
    size = ctx.size
    tiers = sorted(
        set(size["scale_tiers"] if scaling else [])
        | ({size["dataset_runs"]} if dashboard else set())
    )
    stack.reset_journal_tables()
    stack.ensure_policy("bench-scale", max_steps=100, max_recoveries=100_000)
    stack.ensure_policy("bench-recovery", max_steps=100, max_recoveries=100_000)
    gen_rows = [
        "| tier (runs) | added runs | steps/run | steps | events | seconds |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    scale_rows = [
        "p50 in ms; in brackets the tier's (figure ÷ raw INSERT at that moment) relative to the "
        "first tier's: 1.00 is flat, whatever the machine's load did between tiers.",
        "",
        "| runs in the database | raw INSERT | write step | read step | lease+journal |",
        "|---:|---:|---:|---:|---:|",
    ]
    first: tuple[float, float, float] | None = None
    have = 0
    index = 0
    with stack.web_server(workers=workers, threads=threads) as (url, _proc):
        driver = JournalDriver(url, ctx.token)
        try:
            for tier in tiers:
                dataset = size["dataset_runs"]
                # up to the dataset tier: 20-step runs, unknown steps in proportion; above: 1-step
                heavy = max(0, min(tier, dataset) - have)
                light = max(0, tier - max(have + heavy, dataset))
                batches = (
                    (heavy, 20, size["dataset_unknown"] * heavy // dataset),
                    (light, 0, 0),
                )
                for count, steps, unknown in batches:
                    if count <= 0:
                        continue
                    ctx.log(f"datagen: +{count:,} runs × {steps} steps (tier {tier:,})")
                    made = datagen.generate(
                        runs=count, steps=steps, unknown=unknown, start_index=index
                    )
                    index += count
                    have += made["runs"]
                    gen_rows.append(
                        f"| {tier:,} | {made['runs']:,} | {steps} | {made['steps']:,} | {made['events']:,} | {made['seconds']:.0f} |"
                    )
                actual = _count_runs()
                if scaling and tier in size["scale_tiers"]:
                    res.current_part = "scaling"
                    ctx.log(f"scaling: measuring at {actual:,} runs")
                    with stack.admin_connect(BENCH_DB) as conn:
                        conn.execute(
                            "CHECKPOINT"
                        )  # the load's dirty pages are not this tier's cost
                    label = f"{tier:,} runs"
                    raw = res.add(Figure(f"raw fsync'd INSERT at {label}", "ms"))
                    for rep in ctx.baseline(
                        "raw_insert", "--size", "100", "--runs", "2", "--reps", str(size["reps"])
                    )["reps"]:
                        raw.add_rep(rep)
                    _explain_tier(ctx, tier)
                    writes, reads = _step_overhead(driver, size["reps"], 2)
                    leases = _lease_journal(driver, size["reps"], 5)
                    base = f"raw fsync'd INSERT at {label}"
                    fw = res.add(Figure(f"write step at {label}", "ms", baseline=base))
                    fr = res.add(Figure(f"read step at {label}", "ms", baseline=base))
                    fl = res.add(Figure(f"lease+journal at {label}", "ms", baseline=base))
                    for rep in writes:
                        fw.add_rep(rep)
                    for rep in reads:
                        fr.add_rep(rep)
                    for rep in leases:
                        fl.add_rep(rep)
                    first = first or (fw.p50 / raw.p50, fr.p50 / raw.p50, fl.p50 / raw.p50)
                    now = (fw.p50 / raw.p50, fr.p50 / raw.p50, fl.p50 / raw.p50)
                    scale_rows.append(
                        f"| {actual:,} | {raw.p50:.2f} | {fw.p50:.2f} ({now[0] / first[0]:.2f}) | "
                        f"{fr.p50:.2f} ({now[1] / first[1]:.2f}) | {fl.p50:.2f} ({now[2] / first[2]:.2f}) |"
                    )
                if dashboard and tier == size["dataset_runs"]:
                    _dashboard(ctx, url)
                if dashboard and tier in size["export_runs"]:
                    _export(ctx, tier)
            if scaling:
                res.note("scaling", "\n".join(scale_rows))
                _explain(ctx)
        finally:
            driver.close()
    res.note(
        "dashboard" if dashboard else "scaling",
        "Data generated by `bench/datagen.py` (COPY, valid hash chains) in this invocation:\n\n"
        + "\n".join(gen_rows),
    )


def _session_cookie() -> tuple[str, str]:
    """A logged-in admin session made in the database (no login form in the measurement)."""
    code = (
        "from importlib import import_module\n"
        "from django.conf import settings\n"
        "from django.contrib.auth import get_user_model, SESSION_KEY, BACKEND_SESSION_KEY, HASH_SESSION_KEY\n"
        "from django.contrib.auth.models import Group\n"
        "U = get_user_model()\n"
        "u, _ = U.objects.get_or_create(username='bench-admin')\n"
        "u.is_superuser = True; u.is_staff = True; u.set_password('bench-admin-pw'); u.save()\n"
        "[u.groups.add(g) for g in Group.objects.filter(name__in=['admins', 'supervisors', 'auditors'])]\n"
        "s = import_module(settings.SESSION_ENGINE).SessionStore()\n"
        "s[SESSION_KEY] = str(u.pk); s[BACKEND_SESSION_KEY] = 'teams.backends.TeamRoleBackend'\n"
        "s[HASH_SESSION_KEY] = u.get_session_auth_hash(); s.create()\n"
        "print(settings.SESSION_COOKIE_NAME, s.session_key)\n"
    )
    out = stack.shell(code).strip().splitlines()[-1].split()
    return out[0], out[1]


def _dashboard(ctx: Ctx, url: str) -> None:
    res = ctx.results
    res.current_part = "dashboard"
    tree = stack.tree()
    if not (tree / "review" / "views.py").exists():
        res.note("dashboard", "- dashboard pages: `review/` has not landed at the measured commit.")
        return
    name, key = _session_cookie()
    with stack.admin_connect(BENCH_DB) as conn:
        row = conn.execute(
            "SELECT id FROM runs_run WHERE step_count = 20 AND status = 'completed' ORDER BY created_at DESC LIMIT 1"
        ).fetchone()
        transcript_run = str(row[0]) if row else None
        unknown = conn.execute("SELECT count(*) FROM runs_step WHERE state = 'unknown'").fetchone()
        oldest = conn.execute(
            "SELECT run_id, index FROM runs_step WHERE state = 'unknown' ORDER BY intent_at LIMIT 1"
        ).fetchone()
        middle = conn.execute(
            "SELECT id, external_id FROM runs_run ORDER BY created_at OFFSET "
            "(SELECT count(*) / 2 FROM runs_run) LIMIT 1"
        ).fetchone()
    pages = {"runs list (/)": "/", "review queue (/queue/)": "/queue/"}
    if transcript_run:
        pages["20-step transcript (/runs/<id>/)"] = f"/runs/{transcript_run}/"
    if oldest:
        pages["review item (/queue/<id>/<index>/)"] = f"/queue/{oldest[0]}/{oldest[1]}/"
    if middle:
        # the runs page's search (review.selectors._search), each through its index
        number = str(middle[1]).rsplit("-", 1)[-1]
        pages["search: short id (/?q=<8 hex>)"] = f"/?q={str(middle[0])[:8]}"
        pages["search: part of an external id (/?q=ticket-N)"] = f"/?q=ticket-{number}"
        pages["search: part of a customer address"] = f"/?q=customer-{number}@exa"
    samples_n = ctx.size["page_samples"]
    with httpx.Client(
        base_url=url, cookies={name: key}, timeout=60, follow_redirects=False
    ) as http:
        for title, path in pages.items():
            first = http.get(path)
            if first.status_code != 200:
                res.note(
                    "dashboard",
                    f"- {title}: GET {path} answered {first.status_code}; not measured.",
                )
                continue
            fig = res.add(
                Figure(
                    f"dashboard {title}",
                    "ms",
                    target="< 100 ms p50",
                    target_value=100.0,
                    baseline="fsync'd INSERT + COMMIT (unit)",
                )
            )
            for _ in range(ctx.size["reps"]):
                samples = []
                for _ in range(samples_n):
                    t0 = time.perf_counter()
                    r = http.get(path)
                    samples.append((time.perf_counter() - t0) * 1000)
                    assert r.status_code == 200
                fig.add_rep(samples)
            res.extra.setdefault("page_bytes", {})[title] = len(first.content)
    res.note(
        "dashboard",
        f"Pages fetched over HTTP from the web server with an admin session; time to the full response, "
        f"with {_count_runs():,} runs and {unknown[0] if unknown else '?':,} unknown steps in the database.",
    )


def _export(ctx: Ctx, tier: int) -> None:
    """`manage.py export_runs` of every run in the database: MB/s, runs/s, peak RSS."""
    res = ctx.results
    res.current_part = "dashboard"
    tree = stack.tree()
    if not (tree / "audit" / "management" / "commands" / "export_runs.py").exists():
        res.note(
            "dashboard", "- export: `manage.py export_runs` has not landed at the measured commit."
        )
        return
    ctx.log(f"export: all {tier:,} runs as JSONL")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "export_runs", "--format", "jsonl", "--no-progress"],
        cwd=tree,
        env=stack.project_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    peak = 0
    cpu = 0.0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak, cpu
        try:
            p = psutil.Process(proc.pid)
            while not done.is_set():
                peak = max(peak, p.memory_info().rss)
                times = p.cpu_times()
                cpu = times.user + times.system
                time.sleep(0.05)
        except psutil.NoSuchProcess:
            pass

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    written = 0
    lines = 0
    timeout = float(ctx.size["export_timeout"])
    assert proc.stdout is not None
    try:
        while chunk := proc.stdout.read(1 << 20):
            written += len(chunk)
            lines += chunk.count(b"\n")
            if time.perf_counter() - t0 > timeout:
                break
    finally:
        elapsed = time.perf_counter() - t0
        done.set()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    complete = proc.returncode == 0
    if not complete and written == 0:
        assert proc.stderr is not None
        error = proc.stderr.read().decode("utf-8", "replace").strip().splitlines()
        res.note(
            "dashboard",
            f"- export of {tier:,} runs failed: `{error[-1] if error else proc.returncode}`",
        )
        return
    mbps = written / 1e6 / elapsed
    label = f"{tier:,} runs"
    res.add(
        Figure(f"export JSONL throughput, {label}", "MB/s", reps=[[mbps]], higher_is_better=True)
    )
    res.add(
        Figure(f"export runs/s, {label}", "runs/s", reps=[[lines / elapsed]], higher_is_better=True)
    )
    res.add(Figure(f"export peak RSS, {label}", "MB", reps=[[peak / 1e6]]))
    if cpu:
        res.add(
            Figure(
                f"export MB per CPU-second of the exporter, {label}",
                "MB/s",
                reps=[[written / 1e6 / cpu]],
                higher_is_better=True,
                note="wall time is shared with other work; CPU time is the exporter's own",
            )
        )
    res.note(
        "dashboard",
        f"- export of {label}: {written / 1e6:,.0f} MB, {lines:,} lines in {elapsed:.1f} s"
        + (
            ""
            if complete
            else f" (**stopped after {timeout:.0f} s** to keep the suite in its time budget: rate and peak RSS of the part exported)"
        )
        + f"; peak RSS {peak / 1e6:.0f} MB (one measurement; the file size makes repetitions too slow).",
    )


def _plans(run_id: str | None = None) -> tuple[str, dict[str, list[str]]]:
    """EXPLAIN (ANALYZE, BUFFERS) of every hot query, for a run with 20 steps."""
    with stack.admin_connect(BENCH_DB) as conn:
        if run_id is None:
            row = conn.execute(
                "SELECT id FROM runs_run WHERE step_count = 20 ORDER BY created_at DESC LIMIT 1"
            ).fetchone()
            run_id = str(row[0]) if row else "00000000-0000-0000-0000-000000000000"
        plans = {}
        for title, sql in HOT_QUERIES.items():
            conn.execute("BEGIN")
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, {"run": run_id}).fetchall()
            conn.execute("ROLLBACK")
            plans[title] = [r[0] for r in plan]
    return run_id, plans


def _plan_stats(lines: list[str]) -> tuple[float, int]:
    """(execution ms, buffers touched by the top plan node) from EXPLAIN ANALYZE text."""
    exec_ms = next(
        (float(x.split(":")[1].split()[0]) for x in lines if x.startswith("Execution Time")), 0.0
    )
    buffers = 0
    for line in lines:
        if "Buffers:" in line:
            for part in line.split("Buffers:")[1].replace(",", " ").split():
                if "=" in part:
                    buffers += int(part.split("=")[1])
            break
    return exec_ms, buffers


def _explain_tier(ctx: Ctx, tier: int) -> None:
    """Per tier: execution time and buffers of every hot query (buffers do not drift with load)."""
    _, plans = _plans()
    table = ctx.results.extra.setdefault("explain_by_tier", {})
    table[tier] = {title: _plan_stats(lines) for title, lines in plans.items()}


def _explain(ctx: Ctx) -> None:
    table: dict[int, dict[str, tuple[float, int]]] = ctx.results.extra.get("explain_by_tier", {})
    tiers = sorted(table)
    if tiers:
        head = "| hot query | " + " | ".join(f"{t:,} runs" for t in tiers) + " |"
        rows = [head, "|---|" + "---:|" * len(tiers)]
        for title in HOT_QUERIES:
            cells = [
                f"{table[t][title][0]:.3f} ms / {table[t][title][1]} buf"
                for t in tiers
                if title in table[t]
            ]
            rows.append(f"| {title} | " + " | ".join(cells) + " |")
        ctx.results.note(
            "scaling",
            "Server-side execution time and buffers touched (shared hit + read) of the hot "
            "queries at each tier, from EXPLAIN (ANALYZE, BUFFERS). Buffers count pages, so "
            "they do not drift with the machine's load: flat buffers are the proof that the "
            "lookups are index lookups, not scans.\n\n" + "\n".join(rows),
        )
    run_id, plans = _plans()
    with stack.admin_connect(BENCH_DB) as conn:
        runs = conn.execute("SELECT count(*) FROM runs_run").fetchone()
    parts = [f"The plans at the largest tier ({runs[0] if runs else '?':,} runs):"]
    for title, lines in plans.items():
        sql = HOT_QUERIES[title] % {"run": repr(run_id)}
        parts.append(f"**{title}**\n\n```\n{sql}\n" + "\n".join(lines) + "\n```")
    ctx.results.extra["explain"] = parts
    ctx.results.note("scaling", "\n\n".join(parts))
