"""The MCP proxy's sessions: clients that go away mid-call, concurrent calls, a reused `--run`.

An MCP client may send `tools/call` requests concurrently and may disconnect while one still
runs on the upstream; an app's server config starts the proxy with the same `--run` every time.
The upstream here (mcp_upstream.py) serves calls concurrently; its `held` and `held_append`
answer only once the test creates `release` in the work directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from dashboard.roles import SUPERVISORS
from runs.models import Run as RunRow
from tests.integrations.conftest import AgentRun, Desk, McpLines
from tests.integrations.test_mcp_proxy import CALLS, proxy_params, session_calls, upstream_calls
from tests.review.factories import user_in

pytestmark = pytest.mark.slow


def wait_until(check: Callable[[], Any], *, timeout: float = 30.0) -> Any:
    """Wait for something another process does (a guard, not a measurement)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


async def async_wait_until(check: Callable[[], Any], *, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


def release(run: AgentRun) -> None:
    (run.work / "release").write_text("go")


def texts(results: list[Any]) -> list[str]:
    return [r.content[0].text for r in results]


def test_a_client_gone_while_a_write_hangs_leaves_the_run_open_and_the_write_goes_to_review(
    desk: Desk,
) -> None:
    run = desk.new_run("mcp-desk")
    params = proxy_params(run)
    proxy = McpLines([params.command, *params.args], params.env or {})
    assert proxy.call("lookup", {"ticket": "T-1"})["result"]["content"][0]["text"] == "T-1: open"
    proxy.send(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 99,
                "method": "tools/call",
                "params": {"name": "held_append", "arguments": {"line": "refund T-1"}},
            }
        )
    )
    wait_until(lambda: "held_append" in upstream_calls(run))  # the upstream is working on it
    assert proxy.close() == 1  # the client went away: the proxy cannot account for the write

    row = run.row
    assert row.status != "completed"  # never completed over a write that may happen
    assert run.step("files/held_append").state == "intent"

    # the next session (the same proxy restarted) recovers the run: the write may have happened
    held = asyncio.run(session_calls(run, [("lookup", {"ticket": "T-1"})]))
    assert held[0].is_error and "needs_review" in held[0].content[0].text
    assert run.row.status == "needs_review"
    assert run.step("files/held_append").state == "unknown"
    supervisor = Client()
    supervisor.force_login(user_in(SUPERVISORS))
    assert "files/held_append" in supervisor.get("/queue/").content.decode()


async def concurrent_session(run: AgentRun) -> tuple[Any, list[Any]]:
    """A held lookup first, then four calls at once while it hangs; then release it."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    async with (
        stdio_client(proxy_params(run, preloaded=True)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()
        hanging = asyncio.create_task(session.call_tool("held", {"ticket": "T-1"}))
        await async_wait_until(lambda: "held" in upstream_calls(run))
        others = await asyncio.wait_for(
            asyncio.gather(
                session.call_tool("lookup", {"ticket": "T-2"}),
                session.call_tool("append", {"line": "refund T-2"}),
                session.call_tool("append", {"line": "refund T-3"}),
                session.call_tool("lookup", {"ticket": "T-3"}),
            ),
            30,
        )
        assert not hanging.done()  # the others did not wait for it
        release(run)
        held = await asyncio.wait_for(hanging, 30)
    return held, list(others)


def test_concurrent_calls_are_each_journalled_and_a_hanging_one_blocks_none(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    held, others = asyncio.run(concurrent_session(run))
    assert not held.is_error and held.content[0].text == "T-1: held and open"
    assert texts(others) == ["T-2: open", "appended refund T-2", "appended refund T-3", "T-3: open"]
    assert sorted(run.effects) == ["refund T-2", "refund T-3"]

    row = run.row
    assert row.status == "completed" and row.step_count == 5
    steps = list(row.steps.order_by("index").values_list("index", "name", "state", "arguments"))
    assert steps[0] == (0, "files/held", "done", {"ticket": "T-1"})  # the first to arrive
    assert {(name, state) for _, name, state, _ in steps[1:]} == {
        ("files/lookup", "done"),
        ("files/append", "done"),
    }
    assert [index for index, *_ in steps] == [0, 1, 2, 3, 4]
    # the held read gave up its turn when the others came: its intent first, its outcome later
    held_step = run.step("files/held")
    assert held_step.outcome_at is not None and held_step.intent_at < held_step.outcome_at


async def crash_during_concurrent_calls(run: AgentRun) -> None:
    """A held lookup and two writes at once; the proxy is SIGKILLed while the lookup hangs."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    try:
        async with (
            stdio_client(proxy_params(run, preloaded=True)) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.list_tools()
            hanging = asyncio.create_task(session.call_tool("held", {"ticket": "T-1"}))
            await async_wait_until(lambda: "held" in upstream_calls(run))
            written = await asyncio.wait_for(
                asyncio.gather(
                    session.call_tool("append", {"line": "x"}),
                    session.call_tool("append", {"line": "y"}),
                ),
                30,
            )
            assert not any(r.is_error for r in written), written
            os.kill(int((run.work / "proxy.pid").read_text()), signal.SIGKILL)
            await asyncio.wait_for(hanging, 30)
    except Exception:  # the proxy died under the client
        pass


async def resend_in_another_order(run: AgentRun) -> list[Any]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    async with (
        stdio_client(proxy_params(run, preloaded=True)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()
        return list(
            await asyncio.wait_for(
                asyncio.gather(
                    session.call_tool("append", {"line": "y"}),
                    session.call_tool("held", {"ticket": "T-1"}),
                    session.call_tool("append", {"line": "x"}),
                ),
                30,
            )
        )


def test_concurrent_calls_replay_after_a_crash_whatever_order_they_are_sent_again(
    desk: Desk,
) -> None:
    run = desk.new_run("mcp-desk")
    asyncio.run(crash_during_concurrent_calls(run))
    assert sorted(run.effects) == ["x", "y"]
    assert run.step("files/held").state == "intent"  # the read was in flight

    release(run)
    results = asyncio.run(resend_in_another_order(run))
    assert texts(results) == ["appended y", "T-1: held and open", "appended x"]
    assert sorted(run.effects) == ["x", "y"]  # the writes answered from the journal
    assert sorted(upstream_calls(run)) == ["append", "append", "held", "held"]
    row = run.row
    assert row.status == "completed" and row.step_count == 3
    held = run.step("files/held")
    assert (held.index, held.state, held.executions) == (0, "done", 2)  # re-run at its index
    assert not row.steps.filter(name="files/append", executions__gt=1).exists()


def test_a_reused_run_keeps_working_session_after_session(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    assert texts(asyncio.run(session_calls(run, CALLS))) == ["T-1: open", "appended refund T-1"]
    assert run.row.status == "completed"

    # the client's config starts the proxy with the same --run again: it continues the series
    second = asyncio.run(session_calls(run, [("lookup", {"ticket": "T-2"})]))
    assert texts(second) == ["T-2: open"] and not second[0].is_error
    third = asyncio.run(session_calls(run, [("append", {"line": "refund T-3"})]))
    assert texts(third) == ["appended refund T-3"]

    runs = {
        str(row.external_id): row
        for row in RunRow.objects.filter(external_id__startswith=run.external_id)
    }
    assert sorted(runs) == [run.external_id, f"{run.external_id}#2", f"{run.external_id}#3"]
    assert all(row.status == "completed" for row in runs.values())
    assert list(runs[f"{run.external_id}#2"].steps.values_list("name", flat=True)) == [
        "files/lookup"
    ]
    assert run.effects == ["refund T-1", "refund T-3"]


def test_an_upstream_is_error_result_is_journalled_as_an_error_and_replayed_as_one(
    desk: Desk,
) -> None:
    run = desk.new_run("mcp-desk")
    calls = [("refuse", {"reason": "no such ticket"})]
    first = asyncio.run(session_calls(run, calls, kill_after="refuse"))
    assert first[0].is_error and "refused: no such ticket" in first[0].content[0].text
    step = run.step("files/refuse")
    assert step.state == "error"
    assert isinstance(step.result, dict) and step.result["isError"] is True

    again = asyncio.run(session_calls(run, calls))
    assert again[0].is_error and again[0].content[0].text == first[0].content[0].text
    assert upstream_calls(run) == ["refuse"]  # the replay answered from the journal


def test_a_call_the_ledger_refuses_leaves_its_index_to_the_next_call(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    params = proxy_params(run)
    proxy = McpLines([params.command, *params.args], params.env or {})
    refused = proxy.call("lookup", {"ticket": "T" * 1_100_000})["result"]  # over the body limit
    assert refused["isError"]
    answer = proxy.call("lookup", {"ticket": "T-2"})["result"]
    assert not answer.get("isError"), answer
    assert answer["content"][0]["text"] == "T-2: open"
    assert proxy.close() == 0
    assert list(run.row.steps.values_list("index", "arguments")) == [(0, {"ticket": "T-2"})]
    # a read runs before its one journal call: the refused one ran, its answer was withheld
    assert upstream_calls(run) == ["lookup", "lookup"]


def test_a_write_the_ledger_refuses_never_reaches_the_upstream(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    params = proxy_params(run)
    proxy = McpLines([params.command, *params.args], params.env or {})
    refused = proxy.call("append", {"line": "x" * 1_100_000})["result"]  # over the body limit
    assert refused["isError"]
    answer = proxy.call("append", {"line": "refund T-2"})["result"]
    assert not answer.get("isError"), answer
    assert proxy.close() == 0
    assert list(run.row.steps.values_list("index", "arguments")) == [(0, {"line": "refund T-2"})]
    assert upstream_calls(run) == ["append"]  # the refused write's intent came first: never run
    assert run.effects == ["refund T-2"]
