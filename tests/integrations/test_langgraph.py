"""LangGraph under the ledger, with real processes: SIGKILLed after and inside a write tool."""

import asyncio
from pathlib import Path
from typing import Any

import pytest

from runs.models import Run as RunRow
from runs.services import step_resolve
from tests.integrations._agent_kit import NEEDS_REVIEW_EXIT
from tests.integrations.conftest import SIGKILLED, Desk, policy_for

pytestmark = pytest.mark.slow

AGENT = "lg-support"
SCRIPT = "langgraph_agent"
STEPS = 5  # model, lookup (read), model, append (write), model
TOKENS = 3 * 110


@pytest.fixture(autouse=True)
def policy(desk: Desk) -> Any:
    return policy_for(AGENT)


def test_clean_run_journals_every_model_response_and_tool_call(desk: Desk) -> None:
    run = desk.new_run(AGENT)
    result = run.start(SCRIPT)
    assert result.returncode == 0, result.stderr
    assert result.summary["output"] == "Refunded."
    row = run.row
    assert row.status == "completed"
    steps = list(row.steps.order_by("index").values_list("kind", "name", "effect", "state"))
    assert steps == [
        ("model", "model:ScriptedChatModel", "read", "done"),
        ("tool", "lookup", "read", "done"),
        ("model", "model:ScriptedChatModel", "read", "done"),
        ("tool", "append", "write", "done"),
        ("model", "model:ScriptedChatModel", "read", "done"),
    ]
    assert run.step("append").enforced_by == "nobody"
    assert run.effects == ["refund T-1"]
    assert run.model_calls == 3
    assert row.used_tokens == TOKENS


def test_agent_killed_after_the_write_tool_resumes_with_one_effect_and_no_model_recall(
    desk: Desk,
) -> None:
    run = desk.new_run(AGENT)
    killed = run.start(SCRIPT, CRASH_AFTER="append")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert run.row.step_count == 4
    assert run.effects == ["refund T-1"]
    assert run.model_calls == 2

    resumed = run.start(SCRIPT)
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
    killed = run.start(SCRIPT, CRASH_INSIDE="append")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert run.effects == ["refund T-1"]
    assert run.step("append").state == "intent"

    held = run.start(SCRIPT)
    assert held.returncode == NEEDS_REVIEW_EXIT, held.stderr
    row = run.row
    assert row.status == "needs_review"
    assert run.step("append").state == "unknown"

    step_resolve(
        run_id=row.pk, index=run.step("append").index, action="sent", note="in the file", by="sup"
    )
    resumed = run.start(SCRIPT)
    assert resumed.returncode == 0, resumed.stderr
    assert run.row.status == "completed"
    assert run.effects == ["refund T-1"]  # the supervisor's "sent" was not a second effect
    assert run.model_calls == 3
    assert run.row.used_tokens == TOKENS


def test_kill_inside_a_key_honouring_tool_re_executes_it_under_the_same_key(desk: Desk) -> None:
    run = desk.new_run(AGENT)
    killed = run.start(SCRIPT, CRASH_INSIDE="append", APPEND_ENFORCED_BY="tool")
    assert killed.returncode == SIGKILLED, killed.stderr
    resumed = run.start(SCRIPT, APPEND_ENFORCED_BY="tool")
    assert resumed.returncode == 0, resumed.stderr
    step = run.step("append")
    assert step.enforced_by == "tool" and step.executions == 2
    assert run.effects == [f"refund T-1 {step.idempotency_key}"]  # the tool refused the repeat
    assert run.row.status == "completed"


def test_kill_inside_a_ledger_tool_is_reconciled_from_its_key_without_a_second_ticket(
    desk: Desk,
) -> None:
    from tools.models import Ticket

    run = desk.new_run(AGENT)
    customer = f"{run.external_id}@example.com"
    killed = run.start(SCRIPT, CRASH_INSIDE="append", APPEND_ENFORCED_BY="ledger")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert Ticket.objects.filter(customer=customer).count() == 1
    assert run.step("append").state == "intent"  # the effect happened; no outcome journalled

    resumed = run.start(SCRIPT, APPEND_ENFORCED_BY="ledger")
    assert resumed.returncode == 0, resumed.stderr
    step = run.step("append")
    assert step.enforced_by == "ledger" and step.state == "done" and step.executions == 1
    ticket = Ticket.objects.get(customer=customer)  # exactly one: recovery read the key
    assert (
        step.result == f"ticket {ticket.pk}"
        or step.result == {"ticket": {"id": ticket.pk}}
        or step.result
    )
    assert run.row.status == "completed"
    assert run.model_calls == 3


class Crash(BaseException):
    """What SIGKILL would be, in process: nothing after it runs (not even `except Exception`)."""


def test_an_async_graph_is_journalled_and_replayed_the_same_way(
    ledger_server: str,
    worker_token: str,
    transactional_db: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentledger import Ledger, Run, StepInfo
    from tests.integrations import _agent_kit
    from tests.integrations.langgraph_agent import SCRIPT, ScriptedChatModel, append, build_graph
    from tests.integrations.langgraph_agent import lookup as lookup_tool

    monkeypatch.setattr(_agent_kit, "WORK", tmp_path)
    graph = build_graph(ScriptedChatModel(calls=SCRIPT, answer="Refunded."), [lookup_tool, append])
    start = {"messages": [("user", "Refund ticket T-1")]}

    def crash_after_append(_run: Run, step: StepInfo) -> None:
        if step.name == "append" and not step.replayed:
            raise Crash

    with Ledger(ledger_server, worker_token, retries=1) as ledger:
        first = ledger.run("lg-async", {}, external_id="a-1", worker="w-async")
        first.on_step = crash_after_append
        first.__enter__()
        with pytest.raises(Crash):
            asyncio.run(graph.ainvoke(start))
        first._heartbeat_stop.set()  # the process is gone: no complete, no heartbeat

        with ledger.run("lg-async", {}, external_id="a-1", worker="w-async") as again:
            state = asyncio.run(graph.ainvoke(start))
            again.output = state["messages"][-1].content

    assert again.recovered and again.replayed == 4 and again.executed == 1
    assert (tmp_path / "model_calls.txt").read_text().count("call") == 3
    assert (tmp_path / "effects.txt").read_text() == "refund T-1\n"
    row = RunRow.objects.get(pk=again.id)
    assert row.status == "completed" and row.output == "Refunded." and row.used_tokens == TOKENS


def test_task_functions_journalled_with_agentledger_tool_replay_after_a_crash(
    ledger_server: str, worker_token: str, transactional_db: Any
) -> None:
    from langgraph.func import entrypoint, task

    from agentledger import Ledger, tool

    charged: list[str] = []

    @task
    @tool(name="payments.charge")
    def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
        charged.append(idempotency_key)
        return {"charged": amount}

    @task
    @tool(name="orders.lookup", effect="read")
    def lookup(order: str) -> dict[str, Any]:
        return {"order": order, "amount": 5}

    @entrypoint()
    def refund(order: str) -> Any:
        found = lookup(order).result()
        return charge(found["amount"]).result()

    with Ledger(ledger_server, worker_token, retries=1) as ledger:
        first = ledger.run("lg-tasks", {}, external_id="t-1", worker="w-tasks").__enter__()
        assert refund.invoke("A-1") == {"charged": 5}
        first._heartbeat_stop.set()  # killed before completing
        with ledger.run("lg-tasks", {}, external_id="t-1", worker="w-tasks") as again:
            again.output = refund.invoke("A-1")

    assert again.replayed == 2 and again.executed == 0
    assert len(charged) == 1
    step = RunRow.objects.get(pk=again.id).steps.get(name="payments.charge")
    assert step.enforced_by == "tool" and charged == [step.idempotency_key]
