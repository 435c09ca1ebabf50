"""Measure bulk-export memory and throughput: peak RSS must stay flat from 10,000 to 100,000 runs.

    python -m bench.audit_export                      # 10,000 and 100,000 runs, JSONL and CSV
    python -m bench.audit_export --sizes 2000 20000   # smaller, for a quick look
    python -m bench.audit_export --json results.json  # also write the figures as JSON

Uses its own database (`<DATABASE_URL's name>_audit_bench`, recreated at the start unless
--reuse, dropped at the end with --drop), fills it with `bench.testdata.runs_bulk_create` (5 steps, 13 events per
run, valid chains), signs one checkpoint so the export carries proofs, then runs
`manage.py export_runs` in a child process per size and format and reads the child's peak RSS
from wait4(). A baseline (an export selecting no run) shows what Django itself costs.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent


def _bench_url() -> str:
    base = os.environ.get("DATABASE_URL", "postgres://root@127.0.0.1:5432/test")
    parts = urlsplit(base)
    name = parts.path.lstrip("/") or "intentledger"
    return urlunsplit(parts._replace(path=f"/{name}_audit_bench"))


def _admin_sql(url: str, sql: str) -> None:
    import psycopg

    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _ensure_database(url: str) -> None:
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=_env(url),
        check=True,
    )


def _env(url: str) -> dict[str, str]:
    from audit.signing import private_key_generate

    key = os.environ.get("AUDIT_SIGNING_KEY") or _env.key  # type: ignore[attr-defined]
    if not key:
        key = _env.key = private_key_generate()  # type: ignore[attr-defined]
    return {
        **os.environ,
        "DATABASE_URL": url,
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench"),
        "AUDIT_SIGNING_KEY": key,
    }


_env.key = ""  # type: ignore[attr-defined]


def _fill(url: str, total: int) -> dict[str, float]:
    """Top the bench database up to `total` runs and sign a checkpoint; returns timings."""
    code = f"""
import time, django, json
django.setup()
from django.db import transaction
from runs.models import Run
from bench.testdata import runs_bulk_create
from audit.checkpoints import checkpoint_create
have = Run.objects.count()
t = time.monotonic()
left = {total} - have
while left > 0:
    n = min(left, 10000)
    with transaction.atomic():
        runs_bulk_create(runs=n, steps_per_run=5, spread_days=30)
    left -= n
fill = time.monotonic() - t
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("ANALYZE")  # planner statistics, as autovacuum keeps them in production
t = time.monotonic()
result = checkpoint_create()
assert result.checkpoint is not None, result.refused
print(json.dumps({{"fill_seconds": fill, "added": {total} - have,
    "checkpoint_seconds": time.monotonic() - t, "checkpoint_leaves": result.checkpoint.leaves,
    "events": result.check.events}}))
"""
    env = _env(url) | {"DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure(url: str, args: list[str], output: Path) -> dict[str, Any]:
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "export_runs", "--no-progress", "-o", str(output), *args],
        cwd=ROOT,
        env=_env(url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(proc.stderr.read().decode() if proc.stderr else "export failed")
    size = output.stat().st_size
    output.unlink()
    return {
        "seconds": round(seconds, 2),
        # CPU time of the exporting process: what the export costs, whatever else the machine runs
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "bytes": size,
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux reports KiB
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--formats", nargs="+", default=["jsonl", "csv"])
    parser.add_argument("--json", help="write the results to this file as JSON")
    parser.add_argument("--drop", action="store_true", help="drop the bench database afterwards")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the bench database's runs (it may hold more)"
    )
    args = parser.parse_args(argv)
    url = _bench_url()
    if not args.reuse:
        name = urlsplit(url).path.lstrip("/")
        _admin_sql(url, f'DROP DATABASE IF EXISTS "{name}"')
    _ensure_database(url)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "export.out"
        baseline = _measure(url, ["--agent", "no-such-agent"], out)
        print(f"baseline (Django, no run selected): peak RSS {baseline['peak_rss_mb']} MB")
        for size in sorted(args.sizes):
            fill = _fill(url, size)
            print(
                f"{size} runs ({fill['events']} events): filled +{fill['added']} in "
                f"{fill['fill_seconds']:.1f} s; checkpoint over {fill['checkpoint_leaves']} new "
                f"heads in {fill['checkpoint_seconds']:.1f} s"
            )
            for fmt in args.formats:
                m = _measure(url, ["--format", fmt], out)
                row = {
                    "runs": size,
                    "format": fmt,
                    **m,
                    "mb_per_s": round(m["bytes"] / 1e6 / m["seconds"], 1),
                    "runs_per_s": round(size / m["seconds"]),
                    "runs_per_cpu_s": round(size / max(m["cpu_seconds"], 0.01)),
                    "baseline_rss_mb": baseline["peak_rss_mb"],
                    "checkpoint_seconds": round(fill["checkpoint_seconds"], 1),
                }
                results.append(row)
                print(
                    f"  {fmt:5} {m['bytes'] / 1e6:8.1f} MB in {m['seconds']:6.1f} s: "
                    f"{row['mb_per_s']} MB/s, {row['runs_per_s']} runs/s "
                    f"({m['cpu_seconds']} s CPU: {row['runs_per_cpu_s']} runs per CPU-second), "
                    f"peak RSS {m['peak_rss_mb']} MB"
                )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if args.drop:
        name = urlsplit(url).path.lstrip("/")
        _admin_sql(url, f'DROP DATABASE IF EXISTS "{name}"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
