"""Opt-in (AUDIT_MEMORY_TEST=1): the bulk export's peak RSS does not grow with the run count.

Runs bench/audit_export.py on its own database with 2,000 and 20,000 runs; the full figures
(10,000 and 100,000 runs) come from `python -m bench.audit_export`.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.environ.get("AUDIT_MEMORY_TEST"), reason="set AUDIT_MEMORY_TEST=1 (minutes)"
    ),
]


def test_export_memory_stays_flat_from_2000_to_20000_runs(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "DATABASE_URL": "postgres://root@127.0.0.1:5432/test_al_audit"}
    subprocess.run(
        [sys.executable, "-m", "bench.audit_export", "--sizes", "2000", "20000", "--json",
         str(out), "--formats", "jsonl", "--drop"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=1800,
    )  # fmt: skip
    small, large = json.loads(out.read_text())
    assert large["bytes"] > 8 * small["bytes"]  # ten times the runs, about ten times the bytes
    assert large["peak_rss_mb"] < small["peak_rss_mb"] + 25  # not ten times the memory
