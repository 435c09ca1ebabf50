"""The support agent's one seam for tests, the bench and demos: its step hooks (celery_agents/hooks.py).
The crash points live beside the agent (support_agent/crash_points.py), not in it."""

from pathlib import Path

import pytest

from tests.support_agent.conftest import AgentDesk

pytestmark = pytest.mark.slow


def test_without_hooks_the_agent_has_no_crash_points_and_no_timing_fields(
    desk: AgentDesk,
) -> None:
    ticket, customer = desk.new_ticket()
    # the crash point is armed, but no hook module is installed to act on it
    result = desk.run(ticket, customer, AGENT_HOOKS="", AGENT_CRASH_AFTER_STEP="3")
    assert result.returncode == 0, result.stderr
    assert result.summary["status"] == "completed"
    assert not {"first_executed_at", "imported_at", "attach_seconds"} & set(result.summary)


def test_hooks_see_each_step_before_inside_and_after_then_replayed_on_resume(
    desk: AgentDesk, tmp_path: Path
) -> None:
    record = tmp_path / "hooks.txt"
    hooks = "tests.support_agent.recording_hooks,support_agent.crash_points"
    ticket, customer = desk.new_ticket()
    killed = desk.run(
        ticket,
        customer,
        AGENT_CRASH_INSIDE="tickets.comment",
        AGENT_HOOKS=hooks,
        AGENT_HOOKS_RECORD=str(record),
    )
    assert killed.returncode == -9, killed.stderr
    first = record.read_text().splitlines()
    assert first[:4] == [
        "0 model.triage before",
        "0 model.triage after",
        "1 kb.search before",
        "1 kb.search after",
    ]
    assert first[-4:] == [
        "12 model.draft_comment before",
        "12 model.draft_comment after",
        "13 tickets.comment before",
        "13 tickets.comment inside",  # then SIGKILL, before the outcome is journalled
    ]

    record.write_text("")
    resumed = desk.run(ticket, customer, AGENT_HOOKS=hooks, AGENT_HOOKS_RECORD=str(record))
    assert resumed.returncode == 0, resumed.stderr
    second = record.read_text().splitlines()
    assert second[:2] == ["0 model.triage before", "0 model.triage replayed"]
    assert "12 model.draft_comment replayed" in second
    # killed inside its effect: the ledger's gateway kept the comment under the step's key, so
    # recovery settles step 13 from it and this process replays it; the first step it executes,
    # the harness's timing figure, is the one after
    assert "13 tickets.comment replayed" in second
    assert "14 model.check_resolution after" in second
    assert resumed.summary["first_executed_step"] == 14
