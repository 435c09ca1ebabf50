"""Figures for the report, printed, never asserted (timings belong to bench/, not to tests).

Opt-in: AGENTS_MEASURE=1 pytest tests/support_agent/test_measurements.py -s
"""

import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from intentledger import Ledger

from runs.models import BudgetPolicy
from tests.conftest import ROOT
from tests.support_agent.conftest import AgentDesk

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("AGENTS_MEASURE"), reason="set AGENTS_MEASURE=1"),
]
ROUNDS = int(os.environ.get("AGENTS_MEASURE_ROUNDS", "10"))


def test_measure_story_recovery_time(desk: AgentDesk) -> None:
    """New worker process start -> step 13 executing, after a SIGKILL right after step 12."""
    recovery, enter, lease, imports = [], [], [], []
    for _ in range(ROUNDS):
        ticket, customer = desk.new_ticket()
        assert desk.run(ticket, customer, AGENT_CRASH_AFTER_STEP="12").returncode == -9
        resumed = desk.run(ticket, customer)
        assert resumed.summary["first_executed_step"] == 13
        recovery.append(resumed.summary["first_executed_at"] - resumed.started_at)
        enter.append(resumed.summary["attach_seconds"])
        lease.append(resumed.summary["lease_seconds"])
        imports.append(resumed.summary["imported_at"] - resumed.started_at)
    print(
        f"\nstory recovery over {ROUNDS} runs: process start -> step 13 median "
        f"{statistics.median(recovery) * 1000:.0f} ms (min {min(recovery) * 1000:.0f}, max "
        f"{max(recovery) * 1000:.0f}); attach+lease+journal median "
        f"{statistics.median(enter) * 1000:.1f} ms; the lease+journal call alone median "
        f"{statistics.median(lease) * 1000:.1f} ms; process start -> agent imported median "
        f"{statistics.median(imports) * 1000:.0f} ms"
    )


def test_measure_lease_and_journal_for_20_steps_of_10_kb(desk: AgentDesk) -> None:
    BudgetPolicy.objects.update_or_create(
        agent="measure-lease",
        defaults={
            "name": "measure-lease",
            "max_steps": 50,
            "max_tokens": 10**9,
            "max_wall_seconds": 3600,
            "max_recoveries": 10_000,
        },
    )
    blob = "x" * 5_000
    with Ledger(desk.url, desk.token) as ledger:
        run = ledger.run("measure-lease", {}, worker="pod-m").__enter__()
        for i in range(20):
            run.tool(
                "fetch", {"i": i, "payload": blob}, effect="read", fn=lambda **a: {"body": blob}
            )
        run._heartbeat_stop.set()
    headers = {"Authorization": f"Bearer {desk.token}"}
    timings: list[float] = []
    size = 0
    with httpx.Client(base_url=desk.url, headers=headers) as client:
        for _ in range(max(ROUNDS, 20) + 1):
            started = time.perf_counter()
            response = client.post(
                f"/api/v1/runs/{run.id}/lease", json={"worker": "pod-m", "ttl_seconds": 30}
            )
            timings.append(time.perf_counter() - started)
            assert response.status_code == 200, response.text
            assert len(response.json()["journal"]) == 20
            size = len(response.content)
    timings = timings[1:]  # the first pays for connection setup
    print(
        f"\nlease+journal (20 steps, {size // 1024} KiB response) over {len(timings)} calls: "
        f"median {statistics.median(timings) * 1000:.1f} ms, min {min(timings) * 1000:.1f} ms"
    )


def test_measure_sdk_import_time() -> None:
    totals: list[int] = []
    for _ in range(ROUNDS):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import intentledger"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        line = [ln for ln in out.stderr.splitlines() if ln.rstrip().endswith("| intentledger")][-1]
        match: Any = re.search(r"\|\s*(\d+)\s*\|", line)
        totals.append(int(match.group(1)))
    print(
        f"\nimport intentledger over {ROUNDS} runs: median {statistics.median(totals) / 1000:.1f} ms "
        f"cumulative (min {min(totals) / 1000:.1f} ms)"
    )
