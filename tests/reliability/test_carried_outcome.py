"""Kill tests at each crash point a carried outcome adds (docs/design-notes.md): a real worker
process, SIGKILLed there, replaced by another under the same name against a real ledger
(the web server + PostgreSQL). The writes are enforced by their tool, so whatever the point, each
effect happens once and no step goes to review."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from intentledger import Ledger

from runs.models import Event, Step
from runs.models import Run as RunRow
from tests.reliability.carry_agent import AGENT, KeyedTool, steps

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("point", "states_at_kill"),
    [
        # the effect happened, the outcome was held: step 0 is an open intent
        ("after_effect", ["intent"]),
        # the carrying call committed the outcome and the read together, and nothing after
        ("after_carry", ["done", "done"]),
        # the last write's effect happened, the block ended before its outcome call
        ("before_flush", ["done", "done", "intent"]),
    ],
)
def test_a_worker_killed_at_a_carried_outcomes_crash_point_recovers_with_one_effect_each(
    point: str,
    states_at_kill: list[str],
    ledger_server: str,
    worker_token: str,
    transactional_db: Any,
    tmp_path: Path,
) -> None:
    store = tmp_path / "effects.jsonl"
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability.carry_agent",
            *(ledger_server, worker_token),
            str(store),
            point,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == -9, worker.stderr  # SIGKILL, at the point
    run_id = worker.stdout.strip()
    states = list(
        Step.objects.filter(run_id=run_id).order_by("index").values_list("state", flat=True)
    )
    assert states == states_at_kill
    send = KeyedTool(store)
    effects_at_kill = send.effects()

    with (
        Ledger(ledger_server, worker_token) as ledger,
        ledger.attach(run_id, worker="pod-1") as run,
    ):
        assert run.recovered
        steps(run, send)

    row = RunRow.objects.get(pk=run_id)
    assert (row.agent, row.status) == (AGENT, "completed")
    journal = list(Step.objects.filter(run=row).order_by("index"))
    assert [s.state for s in journal] == ["done", "done", "done"]
    effects = send.effects()
    assert effects[: len(effects_at_kill)] == effects_at_kill
    assert [e["key"] for e in effects] == [journal[0].idempotency_key, journal[2].idempotency_key]
    assert [journal[0].result, journal[2].result] == [e["answer"] for e in effects]
    assert row.output == [journal[0].result, journal[2].result]
    types = set(Event.objects.filter(run=row).values_list("type", flat=True))
    assert "step_unknown" not in types
    # an open intent at the kill was re-run under its key, nothing else was
    reran = [s.index for s in journal if s.executions > 1]
    assert reran == [i for i, state in enumerate(states_at_kill) if state == "intent"]
