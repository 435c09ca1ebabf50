"""MCP over stdio (`serve_on_stdio`, under `mcp proxy` and `mcp serve`): pipes are read and
written on the event loop, anything else through the MCP SDK's threads; either way stray output
of the process while serving goes to stderr, not onto the wire."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integrations.conftest import McpLines

pytestmark = pytest.mark.slow

# a server whose tool prints to stdout (as a careless library might) and which, once the client
# has gone, writes to stdout again: that line must reach the client's pipe (fd 1 restored)
SERVER = """
import asyncio, os, sys
import mcp_types as types
from mcp.server.lowlevel import Server
from intentledger.integrations.mcp import stdio

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema={"type": "object"})])

async def call_tool(ctx, params):
    print("stray print", flush=True)
    os.write(1, b"stray write\\n")
    arguments = params.arguments or {}
    await asyncio.sleep(float(arguments.get("seconds", 0)))
    text = str(arguments.get("text", ""))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

asyncio.run(stdio.serve_on_stdio(Server("echo", on_list_tools=list_tools, on_call_tool=call_tool)))
os.write(1, b"after serving\\n")
"""


def test_over_pipes_stray_output_goes_to_stderr_and_stdout_is_restored_after() -> None:
    server = McpLines([sys.executable, "-c", SERVER], {})
    long = "x" * 300_000  # one line, longer than any stream reader's default limit
    for text in ("one", long, "three"):
        answer = server.call("echo", {"text": text})  # a stray line on the wire would fail here
        assert answer["result"]["content"][0]["text"] == text
    assert server.exchange("{not json")["error"]["code"] == -32700
    assert server.proc.stdin is not None and server.proc.stdout is not None
    server.proc.stdin.close()
    assert server.proc.stdout.read() == "after serving\n"
    assert server.proc.wait(timeout=30) == 0


def test_a_file_on_stdin_is_served_through_the_sdks_threads_and_every_request_answered(
    tmp_path: Path,
) -> None:
    """The file ends before the slow call has answered: a file's end is not a client leaving,
    so its calls are answered before the server stops."""
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    }
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo"}},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "slow", "seconds": 0.5}},
        },
    ]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with requests.open() as stdin:
        done = subprocess.run(
            [sys.executable, "-c", SERVER],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    *answers, after = done.stdout.splitlines()
    assert after == "after serving"
    called = {answer["id"]: answer for answer in map(json.loads, answers)}
    assert called[2]["result"]["content"][0]["text"] == ""
    assert called[3]["result"]["content"][0]["text"] == "slow"
    assert "stray print" in done.stderr and "stray write" in done.stderr
