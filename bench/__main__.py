"""python -m bench [all|step|throughput|recovery|gateway|waiters|dashboard|scaling|nodes|servers|traces ...] [--quick|--smoke]

Starts the real stack itself (the web server, `python -m config.serve`, against the bench database, PostgreSQL with its default
durability), measures, and writes bench/RESULTS.md with results.json beside it. Every process
it starts is stopped in a finally block, by process group.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from bench import stack
from bench.common import BENCH, BENCH_DB, BENCH_VENV_PY, Figure, machine_description
from bench.context import TIERS, Ctx
from bench.results import Results

PARTS = [
    "step",
    "throughput",
    "recovery",
    "gateway",
    "waiters",
    "dashboard",
    "scaling",
    "console",
    "nodes",
    "servers",
    "integrations",
    "traces",
]
BENCH_VENV_PACKAGES = [
    "dbos",
    "langgraph",
    "langgraph-checkpoint-postgres",
    "psycopg[binary,pool]",
    "py-spy",
    "pyinstrument",
    "psutil",
    "httpx",
    # the web servers compared with granian, the project's (bench/part_servers.py); not project
    # dependencies
    "gunicorn",
    "httptools",
    "uvloop",
]


def ensure_bench_venv(log: bool = True) -> None:
    """bench/.venv holds the baselines and profilers: never project dependencies. A venv made
    before the list last changed gets what the list added (its stamp file holds the list)."""
    stamp = BENCH / ".venv" / "bench-packages.txt"
    wanted = "\n".join(BENCH_VENV_PACKAGES)
    if BENCH_VENV_PY.exists() and stamp.is_file() and stamp.read_text() == wanted:
        return
    if not BENCH_VENV_PY.exists():
        if log:
            print(
                "[bench] creating bench/.venv (DBOS, LangGraph, profilers: bench only)", flush=True
            )
        subprocess.run([sys.executable, "-m", "venv", str(BENCH / ".venv")], check=True)
    subprocess.run(
        [str(BENCH_VENV_PY), "-m", "pip", "install", "--quiet", *BENCH_VENV_PACKAGES], check=True
    )
    stamp.write_text(wanted)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    out = {}
    for name in ("django", "djangorestframework", "granian", "psycopg", "httpx", "urllib3"):
        try:
            out[name] = version(name)
        except Exception:
            out[name] = "?"
    with stack.admin_connect() as conn:
        row = conn.execute("SHOW server_version").fetchone()
        out["postgresql"] = row[0] if row else "?"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("parts", nargs="*", default=["all"], help=f"all or any of {PARTS}")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="the < 3 minute tier")
    group.add_argument("--smoke", action="store_true", help="the < 1 minute tier (test suite)")
    parser.add_argument(
        "--out",
        default=str(BENCH / "RESULTS.md"),
        help="where RESULTS.md goes (results.json is written beside it)",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="web server (granian) worker processes"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=4,
        help="web server threads per worker (granian blocking threads: requests at once)",
    )
    args = parser.parse_args(argv)
    parts = PARTS if "all" in args.parts else args.parts
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}; choose from {PARTS}")
    if "dashboard" in parts and "scaling" in parts:
        # one pass grows the data through the tiers and measures both on the way
        parts = [p for p in parts if p not in ("dashboard", "scaling")] + ["data"]
    tier = "smoke" if args.smoke else "quick" if args.quick else "full"
    os.environ.setdefault("SECRET_KEY", "bench-only-secret")
    results = Results(quick=tier != "full", tier=tier)
    results.extra["machine"] = machine_description()
    results.extra["web_server"] = {"workers": args.workers, "threads": args.threads}
    results.extra["argv"] = ["python", "-m", "bench", *(argv if argv is not None else sys.argv[1:])]
    ctx = Ctx(tier=tier, results=results)
    started = time.monotonic()
    # SIGTERM unwinds like Ctrl-C, so the finally below stops every process group we started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(args.out)
    try:
        ensure_bench_venv()
        ctx.log(f"tier {tier}; bench database {BENCH_DB}; parts {parts}")
        stack.migrate_bench_db()
        results.extra["commit"] = os.environ.get("BENCH_SERVED_COMMIT", "?")
        stack.ensure_audit_key()
        stack.reset_journal_tables()
        results.versions.update(_versions())
        ctx.token = stack.worker_token()
        _baseline_commit(ctx)
        for part in parts:
            t0 = time.monotonic()
            results.current_part = part
            try:
                _run_part(ctx, part, args.workers, args.threads, out.parent)
                results.parts_run.append(part)
            except PartSkipped as skip:
                results.parts_skipped[part] = str(skip)
                ctx.log(f"{part}: skipped: {skip}")
            except Exception as exc:
                results.parts_skipped[part] = f"failed: {exc!r}"
                traceback.print_exc()
            ctx.log(f"{part}: {time.monotonic() - t0:.0f} s")
    finally:
        stack.stop_all()
        results.extra["elapsed_seconds"] = round(time.monotonic() - started, 1)
        results.extra["generated_at"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        results.extra["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        from bench.report import write_report

        out.parent.mkdir(parents=True, exist_ok=True)
        results.write_json(
            out.with_name("results.json" if out.name == "RESULTS.md" else out.stem + ".json")
        )
        write_report(results, out)
        ctx.log(f"wrote {out} in {results.extra['elapsed_seconds']} s")
    failed = [p for p, why in results.parts_skipped.items() if why.startswith("failed")]
    return 1 if failed else 0


def _profile(ctx: Ctx) -> None:
    """A target was missed: sample the server with py-spy and put the profile in RESULTS.md."""
    from bench import profile

    ctx.results.current_part = "profile"
    for kind in ("write", "read"):
        ctx.log(f"profile: py-spy on a web server (granian) worker under {kind} steps")
        try:
            data = profile.profile(ctx.token, kind=kind, seconds=6.0)
        except Exception as exc:
            ctx.results.note("profile", f"- {kind}: py-spy could not run: {exc}")
            continue
        ctx.results.extra.setdefault("profiles", {})[kind] = data
        cpu_ms = data["samples"] / 400 * 1000 / max(1, data["calls"])
        ctx.results.note(
            "profile",
            f"**{kind} steps** (1 granian worker, 1 thread; about {cpu_ms:.1f} ms of sampled "
            f"on-CPU worker time per call):\n\n" + profile.markdown(kind, data),
        )


class PartSkipped(Exception):
    """A part whose subject has not landed in the tree yet."""


def _baseline_commit(ctx: Ctx) -> None:
    """The invocation's unit: one fsync'd INSERT + COMMIT, measured first."""
    ctx.log("baseline: raw fsync'd INSERT")
    data = ctx.baseline("raw_insert", "--size", "100", "--runs", "2", "--reps", "3")
    fig = ctx.results.add(Figure("fsync'd INSERT + COMMIT (unit)", "ms"))
    for rep in data["reps"]:
        fig.add_rep(rep)
    ctx.results.extra["postgres_settings"] = data.get("settings", {})


def _run_part(ctx: Ctx, part: str, workers: int, threads: int, out_dir: Path) -> None:
    if part == "step":
        from bench import part_step

        with stack.web_server(workers=workers, threads=threads) as (url, _):
            part_step.run(ctx, url)
        missed = [
            f
            for f in ctx.results.figures.values()
            if f.name.startswith("ledger ") and f.meets_target() is False
        ]
        if missed and ctx.tier != "smoke":
            _profile(ctx)
    elif part == "throughput":
        from bench import part_throughput

        part_throughput.run(ctx, workers, threads)
    elif part == "recovery":
        from bench import part_recovery

        with stack.web_server(workers=workers, threads=threads) as (url, _):
            part_recovery.run(ctx, url)
    elif part == "gateway":
        if not (stack.tree() / "tools" / "registry.py").exists():
            raise PartSkipped("the tool gateway (tools/) has not landed")
        from bench import part_gateway

        part_gateway.run(ctx, workers, threads)
    elif part == "console":
        if not (stack.tree() / "console" / "overview.py").exists():
            raise PartSkipped("the console (console/) has not landed")
        from bench import part_console

        part_console.run(ctx, workers, threads)
    elif part == "nodes":
        from bench import part_nodes

        missing = part_nodes.missing_programs()
        if missing:
            raise PartSkipped(f"{', '.join(missing)} not installed")
        part_nodes.run(ctx, workers, threads)
    elif part == "servers":
        from bench import part_servers

        part_servers.run(ctx, workers, threads)
    elif part == "integrations":
        if ctx.tier == "smoke":
            raise PartSkipped("the smoke tier leaves the frameworks out (minutes of set-up)")
        from bench import part_integrations

        part_integrations.run(ctx, out_dir)
    elif part == "traces":
        from bench import part_traces

        part_traces.run(ctx, workers, threads)
    elif part == "waiters":
        from bench import part_waiters

        part_waiters.run(ctx, workers, threads)
    elif part in ("dashboard", "scaling", "data"):
        from bench import part_data

        part_data.run(
            ctx,
            workers,
            threads,
            scaling=part in ("scaling", "data"),
            dashboard=part in ("dashboard", "data"),
        )
    _ = TIERS


if __name__ == "__main__":
    raise SystemExit(main())
