"""bench.part_evidence runs end to end on a few runs, writes its figures and drops its database.

No timing is asserted (figures belong in bench/EVIDENCE.md): the check is that the pack was
built and verified offline, with the figures read from real processes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import stack

ROOT = Path(__file__).resolve().parent.parent.parent
SMOKE_DB = "test_al_evidence_smoke"


@pytest.mark.slow
@pytest.mark.bench
def test_the_evidence_bench_builds_and_verifies_a_pack_and_drops_its_database(
    tmp_path: Path,
) -> None:
    out = tmp_path / "EVIDENCE.md"
    env = {
        **os.environ,
        "BENCH_EVIDENCE_DB": SMOKE_DB,
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-smoke"),
    }
    env.pop("TEST_DATABASE_NAME", None)
    command = [sys.executable, "-m", "bench.part_evidence", "--runs", "40", "--steps", "2"]
    done = subprocess.run(
        [*command, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.with_suffix(".json").read_text())
    assert figures["runs"] == 40 and figures["decisions"] == 4  # every tenth run has one
    # built as the ordinary role a deployment connects as, which the teams' policies bind
    assert figures["role_bypasses_policies"] is False, figures["database_role"]
    assert figures["build_seconds"] > 0 and figures["verify_seconds"] > 0
    assert figures["pack_bytes"] > 0 and "runs.jsonl" in figures["members"]
    assert "# Evidence pack: 40 runs" in out.read_text()
    with stack.admin_connect() as admin:
        left = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [SMOKE_DB])
        assert left.fetchone() is None
