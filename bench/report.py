"""bench/RESULTS.md from a Results: tables first, then what each part's notes and profiles say."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench.common import git_revision
from bench.results import Results, figure_table, fmt

TITLES = {
    "baseline": "Baseline of this invocation",
    "step": "1. Per-step overhead (real HTTP, granian, PostgreSQL fsync on)",
    "sql": "1b. SQL statements and round trips per worker call",
    "servers": "1c. Web servers side by side (the SDK over HTTP)",
    "throughput": "2. Throughput",
    "recovery": "3. Recovery",
    "gateway": "4. Tool gateway",
    "waiters": "4b. Waiters on ?wait= beside a running agent",
    "dashboard": "5. Dashboard and export",
    "scaling": "6. Scaling curve",
    "profile": "Profiles of missed targets",
    "console": "7. Operator's console (overview, timeline)",
    "nodes": "8. Past one machine: web nodes through PgBouncer, replica lag",
    "integrations": "9. Framework integrations and the MCP proxy",
    "traces": "10. Traces: the exporter beside the hot path, export throughput",
}

METHOD = """\
How to read the tables: each figure is measured in ≥ 3 repetitions. **p50** is the median of
the repetition medians, **p99** the nearest-rank 99th percentile over every sample of every
repetition, **spread** the range of the repetition medians relative to their median (how much
the machine drifted during the run). **ratio** is p50 divided by the p50 of the named baseline,
measured in the same invocation on the same PostgreSQL: absolute times on this shared 2-core
machine drift between runs (other work shares the cores), ratios drift much less.
"""


def write_report(results: Results, path: Path) -> None:
    machine = results.extra.get("machine", {})
    web = results.extra.get("web_server", {})
    pg = results.extra.get("postgres_settings", {})
    argv = " ".join(results.extra.get("argv", ["python", "-m", "bench"]))
    lines = [
        "# Agent Ledger — benchmark results",
        "",
        f"Generated {results.extra.get('generated_at') or f'{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}'} UTC "
        f"from commit `{results.extra.get('commit') or git_revision()}` (the served code) "
        f"by `{argv}` (tier **{results.tier}**) in {results.extra.get('elapsed_seconds', '?')} s.",
        "",
        "## Machine and versions",
        "",
        f"- CPU: {machine.get('cpu')} × {machine.get('cores')} cores (shared with other work), "
        f"{machine.get('memory_gb')} GB RAM, Linux {machine.get('kernel')}, Python {machine.get('python')}; "
        f"load average at start {machine.get('loadavg_at_start')}",
        f"- PostgreSQL {results.versions.get('postgresql', '?')} on the same machine, fsync "
        f"`{pg.get('fsync', '?')}`, synchronous_commit `{pg.get('synchronous_commit', '?')}` (server defaults)",
        f"- granian {results.versions.get('granian', '?')} (`python -m config.serve`): "
        f"{web.get('workers')} workers × {web.get('threads')} threads, DEBUG off; clients and "
        "database on the same 2 cores",
        "- versions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(results.versions.items()) if k != "postgresql"),
        "",
        "## Reproduce",
        "",
        "```sh",
        "export SECRET_KEY=dev            # any value; the bench never serves real traffic",
        ".venv/bin/python -m bench all          # full suite, < 15 min; writes bench/RESULTS.md + results.json",
        ".venv/bin/python -m bench all --quick  # < 3 min",
        ".venv/bin/python -m bench step recovery --quick   # single parts",
        "```",
        "",
        "The first run creates `bench/.venv` (DBOS, LangGraph, py-spy, pyinstrument: bench only, never "
        "project dependencies) and the databases `bench_ledger`, `bench_raw`, `bench_dbos_sys`, "
        "`bench_langgraph` on `127.0.0.1:5432` (override with `BENCH_PG_HOST/PORT/USER`, `BENCH_DB`). "
        "The web server listens on a free port and is stopped by process group at the end.",
        "",
        METHOD,
    ]
    summary = _summary(results)
    if summary:
        lines += ["## Targets at a glance", "", summary, ""]
    try:
        from bench.findings import findings

        lines += ["## What the numbers say", "", findings(results), ""]
    except Exception as exc:  # a broken analysis must not lose the measured tables
        lines += ["## What the numbers say", "", f"(analysis failed: {exc!r})", ""]
    for part in [
        "baseline",
        "step",
        "sql",
        "servers",
        "throughput",
        "recovery",
        "gateway",
        "waiters",
        "dashboard",
        "scaling",
        "console",
        "nodes",
        "integrations",
        "traces",
        "profile",
    ]:
        names = results.part_figures.get(part, [])
        notes = results.sections.get(part, [])
        if not names and not notes:
            continue
        lines += [f"## {TITLES.get(part, part)}", ""]
        if names:
            lines += [figure_table(results, names), ""]
        for note in notes:
            lines += [note, ""]
    if results.parts_skipped:
        lines += ["## Parts not measured in this run", ""]
        for part, why in results.parts_skipped.items():
            lines.append(f"- **{part}**: {why}")
        lines.append("")
    path.write_text("\n".join(lines).rstrip() + "\n")


def _summary(results: Results) -> str:
    rows = ["| target | measured | met |", "|---|---|---|"]
    any_row = False
    for fig in results.figures.values():
        if fig.target_value is None:
            continue
        any_row = True
        value = fig.p99 if fig.target_stat == "p99" else fig.p50
        met = fig.meets_target()
        miss = ""
        if met is False and fig.target_value:
            factor = (
                value / fig.target_value if not fig.higher_is_better else fig.target_value / value
            )
            miss = f" (missed by {factor:.2f}×)"
        rows.append(
            f"| {fig.name}: {fig.target} | {fmt(value, fig.unit)} {fig.unit} {fig.target_stat} | "
            f"{'yes' if met else '**no**' + miss} |"
        )
    return "\n".join(rows) if any_row else ""


def main() -> None:
    """python -m bench.report [results.json] [RESULTS.md]: re-render a report from its JSON."""
    import json
    import sys

    from bench.common import BENCH

    source = Path(sys.argv[1]) if len(sys.argv) > 1 else BENCH / "results.json"
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else source.with_name("RESULTS.md")
    if "-h" in sys.argv or "--help" in sys.argv:
        print(main.__doc__)
        return
    write_report(Results.from_json(json.loads(source.read_text())), target)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
