"""The teams bench (issue 47's "Measure") runs end to end at its smoke tier: the hot path with
row-level security forced and disabled, restored after, and the desk over ten teams, served as an
ordinary role. No timing is asserted (figures belong in bench/TEAMS.md)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import stack

ROOT = Path(__file__).resolve().parent.parent.parent
SMOKE_DB = "test_al_bench_teams_smoke"


@pytest.mark.slow
@pytest.mark.bench
def test_the_teams_bench_measures_both_modes_and_restores_the_boundary(tmp_path: Path) -> None:
    with stack.admin_connect() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{SMOKE_DB}" WITH (FORCE)')
    env = {**os.environ, "BENCH_DB": SMOKE_DB, "SECRET_KEY": "bench-smoke"}
    env.pop("TEST_DATABASE_NAME", None)
    out = tmp_path / "TEAMS.md"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.part_teams", "--smoke", "--workers", "1",
             "--threads", "2", "--out", str(out)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

        results = json.loads(out.with_suffix(".json").read_text())
        figures = results["figures"]
        for mode in ("RLS forced (as shipped)", "RLS disabled"):
            for step in ("write step (run.tool)", "read step (run.model)"):
                name = f"ledger SDK {step} over HTTP 100B, {mode}"
                assert figures[name]["samples"] > 0 and figures[name]["p50"] > 0, name
        assert set(results["extra"]["rls_ratio"]) == {"write", "read"}
        per_team = results["extra"]["runs_per_team"]
        assert len(per_team) == 10 and all(n > 0 for n in per_team.values())
        desk = [n for n in figures if n.startswith("desk ")]
        assert len(desk) == 6 and all(figures[n]["samples"] > 0 for n in desk)
        report = out.read_text()
        assert "python -m bench.part_teams --smoke" in report and "forced / disabled" in report

        with stack.admin_connect(SMOKE_DB) as conn:
            # served as an ordinary role that owns the tables; the boundary forced again after
            row = conn.execute(
                "SELECT pg_get_userbyid(relowner), relforcerowsecurity AND relrowsecurity"
                " FROM pg_class WHERE relname = 'runs_run'"
            ).fetchone()
            assert row is not None
            owner, forced = row
            assert owner == stack.APP_ROLE and forced
            role = conn.execute(
                "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", (owner,)
            ).fetchone()
            assert role == (False, False)
    finally:
        with stack.admin_connect() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{SMOKE_DB}" WITH (FORCE)')
