"""The console's figures: the fleet overview at 100k (and 1M) runs, a 200-step run's timeline.

    python -m bench.part_console [--quick|--smoke] [--out bench/CONSOLE.md]

Also `python -m bench console` as a part of the suite. Needs no baseline venv: it migrates the
bench database, fills it with datagen (runs with two steps each, 1% in review; one run with
200 steps), starts the web server and fetches the pages over HTTP with an admin session:

- `GET /console/?days=14` and `?days=30` (the overview: SQL aggregates over the window),
- `GET /runs/<the 200-step run>/` (the transcript with its timeline and conversation), and the
  timeline fragment alone (its queries and rendering, in one Django process).

Targets: overview p50 <= 200 ms (issue 16). The timeline has no target; it is reported.
`BENCH_CONSOLE_KEEP=1` measures the runs already in the bench database (no reset, no datagen
below the count there).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import httpx

from bench import datagen, stack
from bench.common import BENCH, BENCH_DB, Figure, machine_description
from bench.context import Ctx
from bench.results import Results

TIERS = {"smoke": [1_000], "quick": [100_000], "full": [100_000, 1_000_000]}
SAMPLES = {"smoke": 5, "quick": 15, "full": 20}


def _count_runs() -> int:
    with stack.admin_connect(BENCH_DB) as conn:
        row = conn.execute("SELECT count(*) FROM runs_run").fetchone()
        return int(row[0]) if row else 0


def _measure(http: httpx.Client, path: str, reps: int, samples: int) -> list[list[float]]:
    first = http.get(path)
    if first.status_code != 200:
        raise RuntimeError(f"GET {path} answered {first.status_code}")
    out = []
    for _ in range(reps):
        rep = []
        for _ in range(samples):
            t0 = time.perf_counter()
            response = http.get(path)
            rep.append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200
        out.append(rep)
    return out


TIMELINE_ALONE = """
import json, time
from django.template.loader import render_to_string
from console.selectors import run_timeline_context
from runs.models import Run
run = Run.objects.get(pk="{run_id}")
reps = []
for _ in range({reps}):
    rep = []
    for _ in range({samples}):
        t0 = time.perf_counter()
        render_to_string("console/_timeline.html", run_timeline_context(run))
        rep.append((time.perf_counter() - t0) * 1000)
    reps.append(rep)
print(json.dumps(reps))
"""


def _timeline_alone(run_id: str, reps: int, samples: int) -> list[list[float]]:
    """The timeline fragment alone (its queries and its SVG), in one Django process."""
    import json

    code = TIMELINE_ALONE.format(run_id=run_id, reps=reps, samples=samples)
    out = stack.shell(code).strip().splitlines()[-1]
    reps_out: list[list[float]] = json.loads(out)
    return reps_out


def run(ctx: Ctx, workers: int = 2, threads: int = 4) -> None:
    from bench.part_data import _session_cookie

    res = ctx.results
    res.current_part = "console"
    keep = os.environ.get("BENCH_CONSOLE_KEEP") == "1"  # measure the data already loaded
    if not keep:
        stack.reset_journal_tables()
        made = datagen.generate(runs=1, steps=200, start_index=10_000_000)
        ctx.log(f"console: one 200-step run in {made['seconds']:.1f} s")
    with stack.admin_connect(BENCH_DB) as conn:
        row = conn.execute("SELECT id FROM runs_run WHERE step_count = 200 LIMIT 1").fetchone()
        long_run = str(row[0]) if row else None
    have = _count_runs()
    tiers = [have] if keep else TIERS[ctx.tier]
    samples = SAMPLES[ctx.tier]
    rows = [
        "| runs | overview 14 days p50 | overview 30 days p50 | 200-step transcript p50 |",
        "|---:|---:|---:|---:|",
    ]
    with stack.web_server(workers=workers, threads=threads) as (url, _proc):
        name, key = _session_cookie()
        with httpx.Client(base_url=url, cookies={name: key}, timeout=120) as http:
            for tier in tiers:
                add = tier - have
                if add > 0:
                    ctx.log(f"console: datagen +{add:,} runs × 2 steps")
                    gen = datagen.generate(runs=add, steps=2, unknown=add // 100, start_index=have)
                    have += gen["runs"]
                    ctx.log(f"console: {gen['runs']:,} runs in {gen['seconds']:.0f} s")
                actual = _count_runs()
                # what beat does every CONSOLE_ROLLUP_SECONDS (console.tasks.refresh_run_days)
                t0 = time.perf_counter()
                stack.shell("from console.rollup import run_days_refresh; run_days_refresh()")
                refresh = time.perf_counter() - t0
                ctx.log(f"console: rollup refreshed in {refresh:.1f} s (manage.py shell included)")
                with stack.admin_connect(BENCH_DB) as conn:
                    conn.execute("VACUUM ANALYZE runs_run")
                    conn.execute("CHECKPOINT")
                figures = {}
                for label, path in [
                    ("overview 14 days", "/console/?days=14"),
                    ("overview 30 days", "/console/?days=30"),
                ]:
                    fig = res.add(
                        Figure(
                            f"console {label} at {actual:,} runs",
                            "ms",
                            target="<= 200 ms p50",
                            target_value=200.0,
                        )
                    )
                    for rep in _measure(http, path, ctx.size["reps"], samples):
                        fig.add_rep(rep)
                    figures[label] = fig.p50
                if long_run:
                    fig = res.add(
                        Figure(
                            f"console 200-step transcript with timeline at {actual:,} runs", "ms"
                        )
                    )
                    for rep in _measure(http, f"/runs/{long_run}/", ctx.size["reps"], samples):
                        fig.add_rep(rep)
                    figures["timeline"] = fig.p50
                    fig = res.add(
                        Figure(
                            f"console 200-step timeline alone (queries + SVG) at {actual:,} runs",
                            "ms",
                        )
                    )
                    for rep in _timeline_alone(long_run, ctx.size["reps"], samples):
                        fig.add_rep(rep)
                rows.append(
                    f"| {actual:,} | {figures['overview 14 days']:.1f} ms | "
                    f"{figures['overview 30 days']:.1f} ms | {figures.get('timeline', float('nan')):.1f} ms |"
                )
    res.note(
        "console",
        "Pages fetched over HTTP from the web server with an admin session (time to the full "
        "response); runs spread over 30 days by bench.datagen, two steps each, 1% in review. "
        "The overview's rollup (console.rollup) was refreshed once after loading, as beat does "
        "every 5 minutes; today's runs are read live.\n\n" + "\n".join(rows),
    )


def _write(results: Results, out: Path, argv: list[str]) -> None:
    """A short report of this part alone (the suite's RESULTS.md carries it as section 7)."""
    from bench.report import figure_table

    machine = results.extra.get("machine", {})
    lines = [
        "# Agent Ledger — the operator's console, measured",
        "",
        f"Generated {results.extra.get('generated_at')} UTC by "
        f"`python -m bench.part_console {' '.join(argv)}` (tier **{results.tier}**) in "
        f"{results.extra.get('elapsed_seconds')} s, serving "
        f"{os.environ.get('BENCH_SERVED_COMMIT', '?')}. Machine: {machine.get('cpu')} × "
        f"{machine.get('cores')} cores shared with other work (load average at start "
        f"{machine.get('loadavg_at_start')}); PostgreSQL on the same machine.",
        "",
        "p50 is the median of the repetition medians, p99 over every sample; spread is the "
        "range of the repetition medians relative to p50.",
        "",
        figure_table(results, results.part_figures.get("console", [])),
        "",
        *results.sections.get("console", []),
    ]
    out.write_text("\n".join(lines).rstrip() + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.part_console", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="100k runs")
    group.add_argument("--smoke", action="store_true", help="1k runs")
    parser.add_argument("--out", default=str(BENCH / "CONSOLE.md"))
    args = parser.parse_args(argv)
    tier = "smoke" if args.smoke else "quick" if args.quick else "full"
    os.environ.setdefault("SECRET_KEY", "bench-only-secret")
    results = Results(quick=tier != "full", tier=tier)
    results.extra["machine"] = machine_description()
    ctx = Ctx(tier=tier, results=results)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    try:
        stack.migrate_bench_db()
        run(ctx)
        results.parts_run.append("console")
    finally:
        stack.stop_all()
        results.extra["elapsed_seconds"] = round(time.monotonic() - started, 1)
        results.extra["generated_at"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        out = Path(args.out)
        results.write_json(out.with_suffix(".json"))
        _write(results, out, argv if argv is not None else sys.argv[1:])
        ctx.log(f"wrote {out} in {results.extra['elapsed_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
