"""OpenAI Agents SDK specifics: handoffs (the shared kill and review tests for every framework
are in test_frameworks.py)."""

from collections.abc import Callable
from typing import Any

import pytest

from tests.integrations.conftest import SIGKILLED, Desk

pytestmark = pytest.mark.slow

AGENT = "oai-support"
SCRIPT = "openai_agents_agent"


@pytest.fixture(autouse=True)
def policy(make_policy: Callable[..., Any]) -> Any:
    return make_policy(AGENT)


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
