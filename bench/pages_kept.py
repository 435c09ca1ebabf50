"""The dashboard's and the console's pages over HTTP on the data already in the bench database.

    python -m bench.pages_kept <commit> <label> [dashboard] [console]

For comparing two commits on one dataset without regenerating it (the `dashboard` and
`console` parts reset the journal tables and fill them again, which takes most of an hour on a
loaded machine). Serves a `git archive` of <commit> with the web server (`python -m config.serve`, 2 workers × 4 threads),
migrates the bench database to that commit, refreshes the overview's rollup as beat would,
VACUUM ANALYZEs the runs and steps tables, then measures the pages `bench.part_data._dashboard`
measures plus the console overview (14 and 30 days) and the 200-step transcript. Prints one
JSON line of p50s (ms) and appends it to bench/.work/pages_kept.jsonl. SAMPLES (default 7)
samples per repetition, 3 repetitions.

Migrating only goes forward: to measure an older commit without a newer commit's indexes,
migrate back first (`manage.py migrate runs <its last migration>` from the newer tree).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import httpx

from bench import part_console, part_data, stack
from bench.common import BENCH_DB, ROOT, WORK, Figure
from bench.context import TIERS, Ctx
from bench.results import Results


def _serve(commit: str) -> str:
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", commit], capture_output=True, text=True, check=True
    ).stdout.strip()
    target = WORK / f"tree-{rev[:12]}"
    if not (target / "manage.py").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", rev],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    stack._TREE = target
    os.environ["BENCH_SERVED_COMMIT"] = rev[:12]
    return rev[:12]


def main(argv: list[str]) -> int:
    commit, label, *parts = argv
    samples = int(os.environ.get("SAMPLES", "7"))
    TIERS["full"]["page_samples"] = samples
    os.environ.setdefault("SECRET_KEY", "bench-only-secret")
    rev = _serve(commit)
    stack.migrate_bench_db()
    stack.shell("from console.rollup import run_days_refresh; run_days_refresh()")
    with stack.admin_connect(BENCH_DB) as conn:
        conn.execute("VACUUM ANALYZE runs_run")
        conn.execute("VACUUM ANALYZE runs_step")
        conn.execute("CHECKPOINT")
        runs = conn.execute("SELECT count(*) FROM runs_run").fetchone()
        waiting = conn.execute(
            "SELECT count(*) FROM runs_step WHERE state IN ('unknown', 'awaiting_approval')"
        ).fetchone()
        long_run = conn.execute("SELECT id FROM runs_run WHERE step_count = 200 LIMIT 1").fetchone()
    results = Results(quick=False, tier="full")
    ctx = Ctx(tier="full", results=results)
    load_start = os.getloadavg()
    try:
        with stack.web_server(workers=2, threads=4) as (url, _proc):
            if not parts or "dashboard" in parts:
                part_data._dashboard(ctx, url)
            if not parts or "console" in parts:
                name, key = part_data._session_cookie()
                pages = [
                    ("console overview 14 days", "/console/?days=14"),
                    ("console overview 30 days", "/console/?days=30"),
                ]
                if long_run:
                    pages.append(("console 200-step transcript", f"/runs/{long_run[0]}/"))
                with httpx.Client(base_url=url, cookies={name: key}, timeout=120) as http:
                    for title, path in pages:
                        fig = results.add(Figure(title, "ms"))
                        for rep in part_console._measure(http, path, 3, samples):
                            fig.add_rep(rep)
    finally:
        stack.stop_all()
    out: dict[str, Any] = {
        "label": label,
        "rev": rev,
        "runs": runs[0] if runs else None,
        "waiting": waiting[0] if waiting else None,
        "load_start": load_start,
        "load_end": os.getloadavg(),
        "p50": {name: round(fig.p50, 1) for name, fig in results.figures.items()},
    }
    print(json.dumps(out))
    with (WORK / "pages_kept.jsonl").open("a") as fh:
        fh.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
