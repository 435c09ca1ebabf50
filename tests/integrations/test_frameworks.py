"""Every framework integration, with real processes: the same scripted agent (look a ticket up,
append a line, answer) SIGKILLed right after and inside its write tool, then started again.

Each framework's agent is `tests/integrations/<script>.py`, written with the framework's own
offline test model (see conftest). Framework-specific behaviour is tested in test_<name>.py.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from runs.services.decisions import step_resolve
from tests.integrations._agent_kit import NEEDS_REVIEW_EXIT
from tests.integrations.conftest import SIGKILLED, AgentResult, AgentRun, Desk
from tools.models import Ticket

pytestmark = pytest.mark.slow

STEPS = 5  # model, lookup (read), model, append (write), model
TOKENS = 3 * 110  # three model calls of 100 + 10 tokens


@dataclass(frozen=True)
class Framework:
    script: str  # tests/integrations/<script>.py
    agent: str
    model_step: str  # the name its model steps are journalled under
    by_path: bool = False  # the OpenAI Agents SDK imports as `agents`, like our Django app

    def start(self, run: AgentRun, **env: str) -> AgentResult:
        return run.start(self.script, by_path=self.by_path, **env)


FRAMEWORKS = [
    Framework("pydantic_ai_agent", "pai-support", "model:function:scripted:"),
    Framework("openai_agents_agent", "oai-support", "model:ScriptedModel", by_path=True),
    Framework("langgraph_agent", "lg-support", "model:ScriptedChatModel"),
]


@pytest.fixture(params=FRAMEWORKS, ids=lambda f: f.script.removesuffix("_agent"))
def framework(request: Any, desk: Desk, make_policy: Callable[..., Any]) -> Framework:
    framework: Framework = request.param
    make_policy(framework.agent)
    return framework


def test_clean_run_journals_every_model_response_and_tool_call(
    desk: Desk, framework: Framework
) -> None:
    run = desk.new_run(framework.agent)
    result = framework.start(run)
    assert result.returncode == 0, result.stderr
    assert result.summary["output"] == "Refunded."
    row = run.row
    assert row.status == "completed"
    steps = list(row.steps.order_by("index").values_list("kind", "name", "effect", "state"))
    model = ("model", framework.model_step, "read", "done")
    assert steps == [
        model,
        ("tool", "lookup", "read", "done"),
        model,
        ("tool", "append", "write", "done"),
        model,
    ]
    assert run.step("append").enforced_by == "nobody"
    assert run.effects == ["refund T-1"]
    assert run.model_calls == 3
    assert row.used_tokens == TOKENS


def test_agent_killed_after_the_write_tool_resumes_with_one_effect_and_no_model_recall(
    desk: Desk, framework: Framework
) -> None:
    run = desk.new_run(framework.agent)
    # the system prompt may change between the two processes (it is not part of a model step)
    killed = framework.start(run, CRASH_AFTER="append", SYSTEM_PROMPT="Today is Monday.")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert run.row.step_count == 4
    assert run.effects == ["refund T-1"]
    assert run.model_calls == 2

    resumed = framework.start(run, SYSTEM_PROMPT="Today is Tuesday.")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.summary["replayed"] == 4 and resumed.summary["executed"] == 1
    row = run.row
    assert row.status == "completed" and row.output == "Refunded."
    assert run.effects == ["refund T-1"]  # exactly one effect
    assert run.model_calls == 3  # the two recorded responses were not asked for again
    assert row.used_tokens == TOKENS  # tokens counted once
    assert row.used_steps == STEPS
    assert not row.steps.filter(executions__gt=1).exists()


def test_kill_inside_an_unenforced_write_goes_to_review_and_sent_resumes_it(
    desk: Desk, framework: Framework
) -> None:
    run = desk.new_run(framework.agent)
    killed = framework.start(run, CRASH_INSIDE="append")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert run.effects == ["refund T-1"]
    assert run.step("append").state == "intent"

    held = framework.start(run)
    assert held.returncode == NEEDS_REVIEW_EXIT, held.stderr
    row = run.row
    assert row.status == "needs_review"
    assert run.step("append").state == "unknown"

    step_resolve(
        run_id=row.pk, index=run.step("append").index, action="sent", note="in the file", by="sup"
    )
    resumed = framework.start(run)
    assert resumed.returncode == 0, resumed.stderr
    assert run.row.status == "completed"
    assert run.effects == ["refund T-1"]  # the supervisor's "sent" was not a second effect
    assert run.model_calls == 3
    assert run.row.used_tokens == TOKENS


def test_kill_inside_a_key_honouring_tool_re_executes_it_under_the_same_key(
    desk: Desk, framework: Framework
) -> None:
    run = desk.new_run(framework.agent)
    killed = framework.start(run, CRASH_INSIDE="append", APPEND_ENFORCED_BY="tool")
    assert killed.returncode == SIGKILLED, killed.stderr
    resumed = framework.start(run, APPEND_ENFORCED_BY="tool")
    assert resumed.returncode == 0, resumed.stderr
    step = run.step("append")
    assert step.enforced_by == "tool" and step.executions == 2
    assert run.effects == [f"refund T-1 {step.idempotency_key}"]  # the tool refused the repeat
    assert run.row.status == "completed"


def test_kill_inside_a_tool_the_ledger_enforces_replays_its_gateway_step_with_one_ticket(
    desk: Desk, framework: Framework
) -> None:
    # the tool's effect is the ledger's own tickets.create, a gateway step of its own
    run = desk.new_run(framework.agent)
    customer = f"{run.external_id}@example.com"
    killed = framework.start(run, CRASH_INSIDE="append", APPEND_ENFORCED_BY="ledger")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert Ticket.objects.filter(customer=customer).count() == 1
    assert run.model_calls == 2

    resumed = framework.start(run, APPEND_ENFORCED_BY="ledger")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.summary["replayed"] == 4 and resumed.summary["executed"] == 1
    ticket = Ticket.objects.get(customer=customer)  # exactly one effect
    step = run.step("tickets.create")
    assert step.enforced_by == "ledger" and step.state == "done" and step.executions == 1
    assert (step.result or {})["ticket"]["id"] == ticket.pk
    assert ticket.created_by_key == step.idempotency_key
    row = run.row
    assert row.status == "completed" and row.output == "Refunded."
    steps = list(row.steps.order_by("index").values_list("kind", "name"))
    assert steps[3] == ("tool", "tickets.create")  # the framework tool is not a step itself
    assert run.model_calls == 3  # the recorded responses were not asked for again
    assert row.used_tokens == TOKENS
