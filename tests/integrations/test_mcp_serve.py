"""`intentledger mcp serve`: the ledger's own tools over MCP, each call a step on the gateway."""

import asyncio
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest

from runs.models import Run as RunRow
from tests.conftest import ROOT, free_port, stop_process, wait_for_http
from tests.integrations.conftest import Desk, McpLines
from tools.models import IdempotencyKey, Ticket

pytestmark = pytest.mark.slow


def serve(desk: Desk, *args: str) -> McpLines:
    argv = [sys.executable, "-m", "intentledger", "mcp", "serve", "--worker", "serve-1", *args]
    return McpLines(argv, {"INTENTLEDGER_URL": desk.url, "INTENTLEDGER_TOKEN": desk.token})


def ticket_args(customer: str) -> dict[str, Any]:
    return {"customer": customer, "subject": "Charged twice", "body": "Refund one charge."}


def test_ledger_tools_are_listed_and_each_call_is_a_gateway_step(desk: Desk) -> None:
    run = desk.new_run("mcp-serve")
    server = serve(desk, "--agent", run.agent, "--run", run.external_id)
    tools = {t["name"]: t for t in server.request("tools/list")["result"]["tools"]}
    assert tools["kb.search"]["annotations"]["readOnlyHint"] is True
    assert tools["tickets.create"]["annotations"]["readOnlyHint"] is False
    assert tools["tickets.create"]["inputSchema"]["properties"]["customer"]["format"] == "email"

    customer = f"{run.external_id}@example.com"
    assert not server.call("kb.search", {"query": "refund"})["result"].get("isError")
    made = server.call("tickets.create", ticket_args(customer))["result"]
    assert made["structuredContent"]["ticket"]["customer"] == customer
    assert server.close() == 0

    row = run.row
    assert row.status == "completed"
    steps = list(row.steps.order_by("index").values_list("name", "effect", "enforced_by", "state"))
    assert steps == [
        ("kb.search", "read", None, "done"),
        ("tickets.create", "write", "ledger", "done"),
    ]
    step = run.step("tickets.create")
    assert IdempotencyKey.objects.get(key=step.idempotency_key).state == "completed"
    assert Ticket.objects.get(customer=customer).created_by_key == step.idempotency_key


def test_the_client_names_the_run_in_meta(desk: Desk) -> None:
    run = desk.new_run("mcp-serve")
    server = serve(desk)
    refused = server.call("kb.search", {"query": "x"})["result"]
    assert refused["isError"] and "name a run" in refused["content"][0]["text"]
    answer = server.call(
        "kb.search",
        {"query": "refund"},
        **{"intentledger/run": run.external_id, "intentledger/agent": run.agent},
    )
    assert not answer["result"].get("isError")
    assert server.close() == 0
    assert run.row.status == "completed" and run.row.step_count == 1


def test_server_killed_after_a_write_replays_it_without_a_second_ticket(desk: Desk) -> None:
    run = desk.new_run("mcp-serve")
    customer = f"{run.external_id}@example.com"
    first = serve(desk, "--agent", run.agent, "--run", run.external_id)
    made = first.call("tickets.create", ticket_args(customer))["result"]["structuredContent"]
    first.kill()

    again = serve(desk, "--agent", run.agent, "--run", run.external_id)
    replayed = again.call("tickets.create", ticket_args(customer))["result"]["structuredContent"]
    assert replayed == made
    assert again.close() == 0
    assert Ticket.objects.filter(customer=customer).count() == 1
    step = run.step("tickets.create")
    assert step.executions == 1 and run.row.status == "completed"
    assert run.row.used_recoveries == 1


HTTP_TOKEN = "local-clients-need-this-7d1e"


def serve_http(desk: Desk, port: int, **env: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "intentledger", "mcp", "serve", "--agent", "mcp-http"]
    return subprocess.Popen(
        [*argv, "--http", f"127.0.0.1:{port}", "--worker", "http-1"],
        cwd=ROOT,
        env={
            **os.environ,
            "INTENTLEDGER_URL": desk.url,
            "INTENTLEDGER_TOKEN": desk.token,
            **env,
        },
        text=True,
    )


def test_over_streamable_http_a_local_process_needs_the_bearer_token(desk: Desk) -> None:
    """Any process on the machine could reach 127.0.0.1 and spend the ledger token behind it."""
    port = free_port()
    server = serve_http(desk, port, INTENTLEDGER_MCP_TOKEN=HTTP_TOKEN)
    token = HTTP_TOKEN
    try:
        wait_for_http(f"http://127.0.0.1:{port}/mcp", proc=server)
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "intruder", "version": "1"},
            },
        }
        headers = {"Accept": "application/json, text/event-stream"}
        url = f"http://127.0.0.1:{port}/mcp"
        refused = httpx.post(url, json=hello, headers=headers)
        assert refused.status_code == 401
        wrong = httpx.post(url, json=hello, headers={**headers, "Authorization": "Bearer guess"})
        assert wrong.status_code == 401
        answered = httpx.post(
            url, json=hello, headers={**headers, "Authorization": f"Bearer {token}"}
        )
        assert answered.status_code == 200
    finally:
        stop_process(server)


def test_over_streamable_http_a_call_without_a_run_belongs_to_its_session(desk: Desk) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    named = desk.new_run("mcp-http")
    port = free_port()
    server = serve_http(desk, port, INTENTLEDGER_MCP_TOKEN=HTTP_TOKEN)
    customer = f"{named.external_id}@example.com"

    async def client() -> str | None:
        bearer = create_mcp_http_client(headers={"Authorization": f"Bearer {HTTP_TOKEN}"})
        async with (
            bearer,
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=bearer) as (
                read,
                write,
            ),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names_the_run: Any = {"intentledger/run": named.external_id}
            made = await session.call_tool(
                "tickets.create", ticket_args(customer), meta=names_the_run
            )
            assert not made.is_error, made
            found = await session.call_tool("kb.search", {"query": "refund"})
            assert not found.is_error, found
            return None

    try:
        wait_for_http(f"http://127.0.0.1:{port}/mcp", proc=server)
        asyncio.run(client())
    finally:
        stop_process(server)  # SIGTERM: the server completes the runs it touched

    assert named.row.status == "completed"
    assert list(named.row.steps.values_list("name", "enforced_by")) == [
        ("tickets.create", "ledger")
    ]
    assert Ticket.objects.filter(customer=customer).count() == 1
    session_run = RunRow.objects.get(agent="mcp-http", external_id__startswith="mcp-session-")
    assert session_run.status == "completed"
    assert list(session_run.steps.values_list("name", flat=True)) == ["kb.search"]
