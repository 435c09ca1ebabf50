"""The bench suite runs end to end (smoke tier) and cleans up after itself.

No timing is asserted here (timings belong in bench/RESULTS.md): the test checks that every
part produced figures from real samples, that RESULTS.md and results.json were written, and
that no process the bench started is left running.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import stack

ROOT = Path(__file__).resolve().parent.parent.parent
SMOKE_DB = "test_al_bench_smoke"
FRUGAL = ("--workers", "1", "--threads", "2")  # few PostgreSQL connections beside other users


def _processes_using(database: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"/{database}".encode() in environ and b"DATABASE_URL=" in environ:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.bench
def test_bench_smoke_tier_writes_results_from_real_samples_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    out = tmp_path / "RESULTS.md"
    # a fresh database each time: one migrated by other code (another branch, migrations since
    # renumbered) would fail this run for reasons that are not the bench's
    with stack.admin_connect() as admin:  # the server the bench uses (BENCH_PG_HOST/PORT/USER)
        admin.execute(f'DROP DATABASE IF EXISTS "{SMOKE_DB}" WITH (FORCE)')
    env = {
        **os.environ,
        "BENCH_DB": SMOKE_DB,
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-smoke"),
    }
    env.pop("TEST_DATABASE_NAME", None)
    proc = subprocess.run(
        # one web server worker with two threads: the smoke tier checks the machinery, not figures
        [sys.executable, "-m", "bench", "all", "--smoke", *FRUGAL, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    results = json.loads((tmp_path / "results.json").read_text())
    assert {"step", "throughput", "recovery"} <= set(results["parts_run"])
    figures = results["figures"]
    for name in (
        "ledger write step (intent + outcome) 100B",
        "ledger read step (one call) 100B",
        "raw fsync'd INSERT 100B",
        "lease+journal call, 20 steps × ~10 KB (recovery)",
        "throughput, 1 concurrent runs",
        # the kernel called in-process, under the default team's row-level-security scope
        # (bench/kernel_inprocess.py: without a scope, run_create refuses a run of no team)
        "journal kernel in-process write step (2 statements) 100B",
        "journal kernel in-process read step (1 statement) 100B",
    ):
        assert figures[name]["samples"] > 0, name
        assert figures[name]["repetitions"] >= 3, name
        assert figures[name]["p50"] > 0, name
    calls = results["extra"]["sql_per_call"]
    assert calls["POST steps/ (write intent)"]["round_trips"] > 0

    report = out.read_text()
    assert "## Reproduce" in report
    assert "python -m bench all" in report
    assert "| ledger write step (intent + outcome) 100B | ms |" in report

    assert _processes_using(SMOKE_DB) == []
