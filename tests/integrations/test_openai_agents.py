"""The OpenAI Agents SDK under the ledger, with real processes: SIGKILLed after and inside a write tool."""

from typing import Any

import pytest

from runs.services import step_resolve
from tests.integrations._agent_kit import NEEDS_REVIEW_EXIT
from tests.integrations.conftest import SIGKILLED, Desk, policy_for

pytestmark = pytest.mark.slow

AGENT = "oai-support"
SCRIPT = "openai_agents_agent"
STEPS = 5  # model, lookup (read), model, append (write), model
TOKENS = 3 * 110


@pytest.fixture(autouse=True)
def policy(desk: Desk) -> Any:
    return policy_for(AGENT)


def test_clean_run_journals_every_model_response_and_tool_call(desk: Desk) -> None:
    run = desk.new_run(AGENT)
    result = run.start(SCRIPT, by_path=True)
    assert result.returncode == 0, result.stderr
    assert result.summary["output"] == "Refunded."
    row = run.row
    assert row.status == "completed"
    steps = list(row.steps.order_by("index").values_list("kind", "name", "effect", "state"))
    assert steps == [
        ("model", "model:ScriptedModel", "read", "done"),
        ("tool", "lookup", "read", "done"),
        ("model", "model:ScriptedModel", "read", "done"),
        ("tool", "append", "write", "done"),
        ("model", "model:ScriptedModel", "read", "done"),
    ]
    assert run.step("append").enforced_by == "nobody"
    assert run.effects == ["refund T-1"]
    assert run.model_calls == 3
    assert row.used_tokens == TOKENS


def test_agent_killed_after_the_write_tool_resumes_with_one_effect_and_no_model_recall(
    desk: Desk,
) -> None:
    run = desk.new_run(AGENT)
    killed = run.start(SCRIPT, by_path=True, CRASH_AFTER="append")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert run.row.step_count == 4
    assert run.effects == ["refund T-1"]
    assert run.model_calls == 2

    resumed = run.start(SCRIPT, by_path=True)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.summary["replayed"] == 4 and resumed.summary["executed"] == 1
    row = run.row
    assert row.status == "completed" and row.output == "Refunded."
    assert run.effects == ["refund T-1"]  # exactly one effect
    assert run.model_calls == 3  # the two recorded responses were not asked for again
    assert row.used_tokens == TOKENS  # tokens counted once
    assert row.used_steps == STEPS
    assert not row.steps.filter(executions__gt=1).exists()


def test_kill_inside_an_unenforced_write_goes_to_review_and_sent_resumes_it(desk: Desk) -> None:
    run = desk.new_run(AGENT)
    killed = run.start(SCRIPT, by_path=True, CRASH_INSIDE="append")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert run.effects == ["refund T-1"]
    assert run.step("append").state == "intent"

    held = run.start(SCRIPT, by_path=True)
    assert held.returncode == NEEDS_REVIEW_EXIT, held.stderr
    row = run.row
    assert row.status == "needs_review"
    assert run.step("append").state == "unknown"

    step_resolve(
        run_id=row.pk, index=run.step("append").index, action="sent", note="in the file", by="sup"
    )
    resumed = run.start(SCRIPT, by_path=True)
    assert resumed.returncode == 0, resumed.stderr
    assert run.row.status == "completed"
    assert run.effects == ["refund T-1"]  # the supervisor's "sent" was not a second effect
    assert run.model_calls == 3
    assert run.row.used_tokens == TOKENS


def test_kill_inside_a_key_honouring_tool_re_executes_it_under_the_same_key(desk: Desk) -> None:
    run = desk.new_run(AGENT)
    killed = run.start(SCRIPT, by_path=True, CRASH_INSIDE="append", APPEND_ENFORCED_BY="tool")
    assert killed.returncode == SIGKILLED, killed.stderr
    resumed = run.start(SCRIPT, by_path=True, APPEND_ENFORCED_BY="tool")
    assert resumed.returncode == 0, resumed.stderr
    step = run.step("append")
    assert step.enforced_by == "tool" and step.executions == 2
    assert run.effects == [f"refund T-1 {step.idempotency_key}"]  # the tool refused the repeat
    assert run.row.status == "completed"


def test_a_handoff_agent_is_journalled_into_the_same_run_and_replayed(desk: Desk) -> None:
    run = desk.new_run(AGENT)
    killed = run.start(SCRIPT, by_path=True, CRASH_AFTER="append", TRIAGE="1")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert run.model_calls == 3  # triage, then support twice

    resumed = run.start(SCRIPT, by_path=True, TRIAGE="1")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.summary["replayed"] == 5 and resumed.summary["executed"] == 1
    assert run.effects == ["refund T-1"]
    assert run.model_calls == 4
    row = run.row
    assert row.status == "completed" and row.output == "Refunded."
    names = list(row.steps.order_by("index").values_list("name", flat=True))
    model = "model:ScriptedModel"  # triage's, then support's (one model serves both here)
    assert names == [model, model, "lookup", model, "append", model]
    assert row.used_tokens == 4 * 110
