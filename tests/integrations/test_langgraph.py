"""LangGraph specifics: the ledger's gateway tools, async graphs, @task functions (the shared
kill and review tests for every framework are in test_frameworks.py)."""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runs.models import Run as RunRow
from tests.integrations.conftest import Crash

pytestmark = pytest.mark.slow

AGENT = "lg-support"
TOKENS = 3 * 110


@pytest.fixture(autouse=True)
def policy(make_policy: Callable[..., Any]) -> Any:
    return make_policy(AGENT)


def test_an_async_graph_is_journalled_and_replayed_the_same_way(
    ledger_server: str,
    worker_token: str,
    transactional_db: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from intentledger import Ledger, Run, StepInfo

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


def test_task_functions_journalled_with_intentledger_tool_replay_after_a_crash(
    ledger_server: str, worker_token: str, transactional_db: Any
) -> None:
    from intentledger import Ledger, tool
    from langgraph.func import entrypoint, task

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
        charged_now = charge(found["amount"]).result()
        lookup(order).result()  # the call that carries the charge's outcome (a key-enforced write)
        return charged_now

    with Ledger(ledger_server, worker_token, retries=1) as ledger:
        first = ledger.run("lg-tasks", {}, external_id="t-1", worker="w-tasks").__enter__()
        assert refund.invoke("A-1") == {"charged": 5}
        first._heartbeat_stop.set()  # killed before completing
        with ledger.run("lg-tasks", {}, external_id="t-1", worker="w-tasks") as again:
            again.output = refund.invoke("A-1")

    assert again.replayed == 3 and again.executed == 0
    assert len(charged) == 1
    step = RunRow.objects.get(pk=again.id).steps.get(name="payments.charge")
    assert step.enforced_by == "tool" and charged == [step.idempotency_key]
