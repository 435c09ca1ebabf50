"""Teams, measured (issue 47's "Measure"): what row-level security costs the hot path, and the desk
with runs spread over ten teams.

    python -m bench.part_teams [--smoke|--quick] [--desk-runs N] [--keep] [--out bench/TEAMS.md]

Serves the ledger with the web server as the bench's ordinary role (bench.common.APP_ROLE: neither a
superuser nor BYPASSRLS, so the forced policies bind it, as on a managed database), then:

(a) **The hot path with and without row-level security, in the same run.** Steps end to end
    through the worker SDK over HTTP (`bench.sdk_steps`: a write step is `run.tool`, intent and
    outcome; a read step `run.model`, one call), alternately with row-level security forced on
    every team-owned table as shipped, and disabled on the same tables (`ALTER TABLE ... NO FORCE
    / DISABLE ROW LEVEL SECURITY` by the bench's admin connection, restored to ENABLE + FORCE
    after each round and on any error). The rounds alternate so that drift in the machine's load
    falls on both. What stays in both: the scope the application names per transaction (its
    `set_config` rides in the first statement's query string), so the ratio is the policies' own
    cost.
(b) **The desk at size, over ten teams.** bench.datagen spreads the runs over 10 teams (two steps
    each, 1% in review); then over HTTP the console overview (14 days), the review queue and a
    runs search by part of an external id, p50, as a supervisor of one team (a tenth of the runs)
    and as a person holding a role in all ten teams.

Tiers: smoke 1,000 desk runs (the test suite), quick 100,000, full 1,000,000; `--desk-runs`
overrides; `--keep` measures on the runs already there (topped up), instead of starting empty. Writes TEAMS.md and TEAMS.json beside each other.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench import datagen, stack
from bench.common import BENCH, BENCH_DB, Figure, machine_description
from bench.context import Ctx
from bench.part_console import _count_runs, _measure
from bench.part_step import _sdk_steps
from bench.results import Results

DESK_RUNS = {"smoke": 1_000, "quick": 100_000, "full": 1_000_000}
HOT_ROUNDS = {"smoke": 2, "quick": 5, "full": 8}  # alternations, one repetition each per mode
HOT_RUNS = {"smoke": 1, "quick": 3, "full": 5}  # 20-step runs per repetition
DESK_SAMPLES = {"smoke": 3, "quick": 10, "full": 15}
TEAMS = 10
SIZE = 100
MODES = {"forced": "RLS forced (as shipped)", "off": "RLS disabled"}


def _secured_tables(conn: Any) -> list[str]:
    """Every table (partitions included) row-level security is forced on: the boundary's."""
    rows = conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relforcerowsecurity"
        " ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows]


@contextmanager
def rls_disabled(tables: list[str]) -> Iterator[None]:
    """Row-level security off on `tables` for the enclosed block, then enabled and forced again
    (the admin connection: a superuser may alter the role's tables)."""
    with stack.admin_connect(BENCH_DB) as conn:
        with conn.transaction():
            for table in tables:
                conn.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
                conn.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
        try:
            yield
        finally:
            with conn.transaction():
                for table in tables:
                    conn.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
                    conn.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")


def hot_path(ctx: Ctx, url: str) -> dict[str, float]:
    """(a): SDK write and read steps over HTTP, alternating forced and disabled RLS."""
    res = ctx.results
    with stack.admin_connect(BENCH_DB) as conn:
        tables = _secured_tables(conn)
    if not tables:
        raise RuntimeError("no table has row-level security forced: not the shipped boundary")
    res.extra["rls_tables"] = len(tables)
    figs = {
        (mode, kind): res.add(Figure(f"ledger SDK {step} over HTTP {SIZE}B, {words}", "ms"))
        for mode, words in MODES.items()
        for kind, step in (("write", "write step (run.tool)"), ("read", "read step (run.model)"))
    }
    _sdk_steps(ctx, "http", url, SIZE, 1, 1)  # warm the workers' connections and code paths
    for n in range(HOT_ROUNDS[ctx.tier]):
        for mode in MODES if n % 2 == 0 else reversed(list(MODES)):
            ctx.log(f"teams: hot path round {n + 1}, {MODES[mode]}")
            block = rls_disabled(tables) if mode == "off" else _nothing()
            with block:
                sdk = _sdk_steps(ctx, "http", url, SIZE, HOT_RUNS[ctx.tier], 1)
            for kind in ("write", "read"):
                for rep in sdk[kind]:
                    figs[(mode, kind)].add_rep(rep)
    with stack.admin_connect(BENCH_DB) as conn:  # restored as shipped
        assert _secured_tables(conn) == tables, "row-level security was not restored"
    ratios = {
        kind: figs[("forced", kind)].p50 / figs[("off", kind)].p50 for kind in ("write", "read")
    }
    res.extra["rls_ratio"] = ratios
    rows = [
        "| step | RLS forced p50 | p99 | RLS disabled p50 | p99 | forced / disabled |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in ("write", "read"):
        on, off = figs[("forced", kind)], figs[("off", kind)]
        rows.append(
            f"| {kind} step | {on.p50:.2f} ms | {on.p99:.2f} ms | {off.p50:.2f} ms | "
            f"{off.p99:.2f} ms | {ratios[kind]:.2f}× |"
        )
    res.note(
        "teams",
        f"**(a) The hot path with and without row-level security** ({HOT_ROUNDS[ctx.tier]} "
        f"alternating rounds of {HOT_RUNS[ctx.tier]} runs × 20 steps per mode, {SIZE} B results, "
        f"through the SDK over HTTP; RLS disabled on the {len(tables)} tables it is forced on, "
        "then restored):\n\n" + "\n".join(rows),
    )
    return ratios


@contextmanager
def _nothing() -> Iterator[None]:
    yield


PERSON = """
from importlib import import_module
from django.conf import settings
from django.contrib.auth import get_user_model, SESSION_KEY, BACKEND_SESSION_KEY, HASH_SESSION_KEY
from teams.models import Team
from teams.services import grant_role
u, _ = get_user_model().objects.get_or_create(username={name!r})
u.set_password('bench-person-pw'); u.save()
for team in Team.objects.filter(slug__in={slugs!r}):
    for role in ('supervisor', 'admin'):
        grant_role(u, team, role, actor='bench')
s = import_module(settings.SESSION_ENGINE).SessionStore()
s[SESSION_KEY] = str(u.pk); s[BACKEND_SESSION_KEY] = 'teams.backends.TeamRoleBackend'
s[HASH_SESSION_KEY] = u.get_session_auth_hash(); s.create()
print(settings.SESSION_COOKIE_NAME, s.session_key)
"""


def _session_of(name: str, slugs: list[str]) -> tuple[str, str]:
    """A session of a person (not a superuser) with the supervisor and admin roles in `slugs`."""
    out = stack.shell(PERSON.format(name=name, slugs=slugs))
    cookie, key = out.strip().splitlines()[-1].split()
    return cookie, key


def desk(ctx: Ctx, url: str, runs: int) -> None:
    """(b): the desk over `runs` runs in TEAMS teams, as one team's supervisor and as a person
    of all teams."""
    res = ctx.results
    have = _count_runs()
    if have < runs:
        ctx.log(f"teams: datagen +{runs - have:,} runs × 2 steps over {TEAMS} teams")
        gen = datagen.generate(
            runs=runs - have, steps=2, unknown=(runs - have) // 100, start_index=have, teams=TEAMS
        )
        ctx.log(f"teams: {gen['runs']:,} runs in {gen['seconds']:.0f} s")
        res.extra["datagen_seconds"] = round(gen["seconds"], 1)
    stack.shell("from console.rollup import run_days_refresh; run_days_refresh()")
    with stack.admin_connect(BENCH_DB) as conn:
        conn.execute("VACUUM ANALYZE runs_run")
        conn.execute("VACUUM ANALYZE runs_step")
        conn.execute("CHECKPOINT")
        actual = _count_runs()
        per_team = dict(
            conn.execute(
                "SELECT t.slug, count(r.id) FROM teams_team t LEFT JOIN runs_run r"
                " ON r.team_id = t.id GROUP BY t.slug ORDER BY t.slug"
            ).fetchall()
        )
        middle = conn.execute(
            "SELECT external_id FROM runs_run WHERE team_id = (SELECT id FROM teams_team"
            " WHERE slug = 'bench-team-02') ORDER BY created_at"
            " OFFSET (SELECT count(*) / 20 FROM runs_run) LIMIT 1"
        ).fetchone()
    number = str(middle[0]).rsplit("-", 1)[-1] if middle else "1"
    slugs = sorted(per_team)
    people = {
        "supervisor of one team (bench-team-02)": _session_of("bench-one-team", ["bench-team-02"]),
        f"person of all {len(slugs)} teams": _session_of("bench-all-teams", slugs),
    }
    pages = {
        "overview 14 days": "/console/?days=14",
        "review queue": "/queue/",
        f"search `ticket-{number}`": f"/?q=ticket-{number}",
    }
    rows = [
        "| as | " + " | ".join(f"{p} p50" for p in pages) + " |",
        "|---|" + "---:|" * len(pages),
    ]
    samples = DESK_SAMPLES[ctx.tier]
    for who, (cookie, key) in people.items():
        cells = []
        with httpx.Client(base_url=url, cookies={cookie: key}, timeout=300) as http:
            for page, path in pages.items():
                ctx.log(f"teams: {page} as {who}")
                fig = res.add(
                    Figure(f"desk {page} at {actual:,} runs over {TEAMS} teams, {who}", "ms")
                )
                for rep in _measure(http, path, ctx.size["reps"], samples):
                    fig.add_rep(rep)
                cells.append(f"{fig.p50:.1f} ms")
        rows.append(f"| {who} | " + " | ".join(cells) + " |")
    res.extra["desk_runs"] = actual
    res.extra["runs_per_team"] = per_team
    res.note(
        "teams",
        f"**(b) The desk at {actual:,} runs over {len(slugs)} teams** "
        f"({min(per_team.values()):,} to {max(per_team.values()):,} a team; two steps each, 1% "
        "in review), pages over HTTP from the web server, each person signed in with the supervisor "
        "and admin roles in their teams (not a superuser: the scope names their teams, and the "
        "forced policies filter every query):\n\n" + "\n".join(rows),
    )


def run(ctx: Ctx, workers: int, threads: int, desk_runs: int, keep: bool = False) -> None:
    ctx.results.current_part = "teams"
    if not keep:
        stack.reset_journal_tables()
    ctx.token = stack.worker_token()
    with stack.web_server(workers=workers, threads=threads) as (url, _proc):
        hot_path(ctx, url)
        desk(ctx, url, desk_runs)


def _write(results: Results, out: Path, argv: list[str]) -> None:
    from bench.report import figure_table

    machine = results.extra.get("machine", {})
    command = f"python -m bench.part_teams {' '.join(argv)}".strip()
    lines = [
        "# Agent Ledger — teams, measured (issue 47)",
        "",
        f"Generated {results.extra.get('generated_at')} UTC by `{command}` (tier "
        f"**{results.tier}**) in {results.extra.get('elapsed_seconds')} s, serving "
        f"{os.environ.get('BENCH_SERVED_COMMIT', '?')} as the ordinary role the bench's server "
        f"connects as. Machine: {machine.get('cpu')} × {machine.get('cores')} cores shared with "
        f"other work (load average at start {machine.get('loadavg_at_start')}, at the end "
        f"{results.extra.get('loadavg_at_end')}); PostgreSQL on the same machine.",
        "",
        "p50 is the median of the repetition medians, p99 over every sample; spread is the "
        "range of the repetition medians relative to p50.",
        "",
        "\n\n".join(results.sections.get("teams", [])),
        "",
        figure_table(results, results.part_figures.get("teams", [])),
        "",
        "## Reproduce",
        "",
        f"    {command}",
    ]
    out.write_text("\n".join(lines).rstrip() + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.part_teams", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="100k desk runs")
    group.add_argument("--smoke", action="store_true", help="1k desk runs")
    parser.add_argument("--desk-runs", type=int, help="the desk's runs (default: the tier's)")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the runs in the bench database (a 1M desk takes minutes to generate): no "
        "reset, datagen only tops up to --desk-runs",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--out", default=str(BENCH / "TEAMS.md"))
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
        run(ctx, args.workers, args.threads, args.desk_runs or DESK_RUNS[tier], keep=args.keep)
        results.parts_run.append("teams")
    finally:
        stack.stop_all()
        results.extra["elapsed_seconds"] = round(time.monotonic() - started, 1)
        results.extra["generated_at"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        results.extra["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        out = Path(args.out)
        results.write_json(out.with_suffix(".json"))
        _write(results, out, argv if argv is not None else sys.argv[1:])
        ctx.log(f"wrote {out} in {results.extra['elapsed_seconds']} s")
    print(json.dumps({"rls_ratio": results.extra.get("rls_ratio")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
