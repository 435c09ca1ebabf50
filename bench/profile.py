"""Where a worker call's time goes: py-spy sampling a web server worker under a steady load.

    python -m bench.profile [--calls N] [--kind write|read]

py-spy (bench/.venv) attaches to the worker process of a single-worker, single-thread web server
(granian, `python -m config.serve`) while this process drives 20-step runs; the collapsed stacks
are folded into inclusive shares of the frames that matter (DRF validation, the services, SQL
round trips, JSON, middleware).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench import stack
from bench.client import JournalDriver
from bench.common import BENCH, WORK, payload_of

PY_SPY = BENCH / ".venv" / "bin" / "py-spy"

# (label, substring of a frame "function (file)") — inclusive share of samples containing it
BUCKETS = [
    ("lean path (runs/hotpath.py)", "answer (runs/hotpath.py"),
    ("  token lookup (principal_for)", "principal_for (runs/authentication.py"),
    ("  body parse (strict JSON)", "parse_strict_json (runs/hotpath.py"),
    ("  journal kernel call (one statement)", "_call (runs/kernel.py"),
    ("  canonical JSON + hashes", "canonical_json (runs/canonical.py"),
    ("  response (orjson)", "_dumps (runs/hotpath.py"),
    ("whole request (WSGI handler)", "__call__ (django/core/handlers/wsgi.py"),
    ("DRF dispatch (auth + parse + view)", "dispatch (rest_framework/views.py"),
    ("  token authentication", "authenticate (runs/authentication.py"),
    ("  request body parse", "_parse (rest_framework/request.py"),
    ("  input validation (serializers)", "is_valid (rest_framework/serializers.py"),
    ("  step_intent_record", "step_intent (runs/kernel.py"),
    ("  step_outcome_record", "step_outcome (runs/kernel.py"),
    ("  run_for_update (SELECT … FOR UPDATE)", "run_for_update (runs/lock_objects.py"),
    ("  event_append (hash + INSERT, cold paths)", "event_append (runs/kernel.py"),
    ("  Model.save", "save (django/db/models/base.py"),
    ("  COMMIT", "commit (django/db/backends/base/base.py"),
    ("  response rendering", "render (rest_framework/response.py"),
    ("all SQL execution (psycopg)", "execute (psycopg/cursor.py"),
    ("Django ORM SQL compilation", "as_sql (django/db/models/sql/compiler.py"),
    ("connection health check", "is_usable (django/db/backends/postgresql/base.py"),
    ("middleware (outside the view)", "__call__ (django/utils/deprecation.py"),
    # granian calls the app from here, so the app's frames are inside it (its HTTP handling is
    # Rust, outside Python's frames)
    ("granian's WSGI runner (the app's call included)", "_runner (granian/wsgi.py"),
]


def profile(token: str, *, kind: str = "write", seconds: float = 8.0) -> dict[str, Any]:
    WORK.mkdir(parents=True, exist_ok=True)
    out_file = WORK / f"pyspy-{kind}.txt"
    with stack.web_server(workers=1, threads=1) as (url, proc):
        worker_pid = _worker_pid(proc.pid)
        driver = JournalDriver(url, token)
        stop = threading.Event()
        calls = 0

        def drive() -> None:
            nonlocal calls
            payload = payload_of(100)
            while not stop.is_set():
                run_id = driver.create()
                epoch = driver.lease(run_id)["epoch"]
                for i in range(20):
                    if stop.is_set():
                        break
                    if kind == "write":
                        driver.write_intent(run_id, epoch, i, {"i": i})
                        driver.outcome(run_id, epoch, i, payload)
                        calls += 2
                    else:
                        driver.read_step(run_id, epoch, i, {"i": i}, payload)
                        calls += 1

        thread = threading.Thread(target=drive)
        thread.start()
        time.sleep(0.5)
        spy = subprocess.run(
            [
                str(PY_SPY),
                "record",
                "--pid",
                str(worker_pid),
                "--duration",
                str(int(seconds)),
                "--rate",
                "400",
                "--format",
                "raw",
                "--nonblocking",
                "--output",
                str(out_file),
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
        stop.set()
        thread.join()
        driver.close()
    if spy.returncode != 0:
        raise RuntimeError(f"py-spy failed: {spy.stderr[-500:]}")
    return {"calls": calls, **fold(out_file)}


def _worker_pid(main: int) -> int:
    """The web server's worker: granian forks each from its main process, so a worker is a
    child with the main's command line (a helper multiprocessing may start has its own)."""
    server = psutil.Process(main)
    for _ in range(50):
        workers = [c for c in server.children() if c.cmdline() == server.cmdline()]
        if workers:
            return workers[0].pid
        time.sleep(0.1)
    raise RuntimeError("no web server worker found")


def fold(path: Path) -> dict[str, Any]:
    """Inclusive sample shares per bucket, and the hottest leaf frames."""
    total = 0
    hits = collections.Counter[str]()
    leaves = collections.Counter[str]()
    for line in path.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text:
            continue
        count = int(count_text)
        total += count
        frames = stack_text.split(";")
        for label, needle in BUCKETS:
            if any(needle in frame for frame in frames):
                hits[label] += count
        leaves[_short(frames[-1])] += count
    return {
        "samples": total,
        "buckets": {label: hits[label] / total if total else 0.0 for label, _ in BUCKETS},
        "top_leaves": [(name, n / total) for name, n in leaves.most_common(12)] if total else [],
    }


def _short(frame: str) -> str:
    frame = frame.replace("/work/main/.venv/lib/python3.12/site-packages/", "")
    frame = frame.replace("/work/main/", "")
    return frame


def markdown(kind: str, data: dict[str, Any]) -> str:
    rows = [f"py-spy, {data['samples']} samples over {data['calls']} {kind} calls:", ""]
    rows += ["| where | share of worker time |", "|---|---:|"]
    for label, share in data["buckets"].items():
        rows.append(f"| {label} | {share * 100:.0f}% |")
    rows += ["", "Hottest leaf frames:", "", "| frame | share |", "|---|---:|"]
    for name, share in data["top_leaves"]:
        rows.append(f"| `{name}` | {share * 100:.1f}% |")
    return "\n".join(rows)


def main() -> None:
    import os

    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--kind", choices=["write", "read"], default="write")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    os.environ.setdefault("SECRET_KEY", "bench-only-secret")
    try:
        stack.migrate_bench_db()
        token = stack.worker_token()
        print(markdown(args.kind, profile(token, kind=args.kind, seconds=args.seconds)))
    finally:
        stack.stop_all()


if __name__ == "__main__":
    main()
