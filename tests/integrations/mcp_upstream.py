"""A small upstream MCP server (stdio) for the proxy tests, written with the `mcp` package.

`lookup` is annotated read-only; `append` writes a line to WORK_DIR/effects.txt, `append_keyed`
too but once per idempotency key (the proxy sends it in `_meta`). Every call is
counted in WORK_DIR/upstream_calls.txt. Over stdio it records the pid of the proxy that started it
in proxy.pid (its parent, or LAUNCHED_BY_PID when launch.py started it, forked from a preloaded
interpreter); with UPSTREAM_HTTP_PORT it serves streamable HTTP instead.
`held` (read-only) and `held_append` (a write) wait until WORK_DIR/release exists: a call that
hangs while the test does something else (calls are served concurrently); `refuse` answers
with `isError: true` (the tool's own failure, not a protocol error).
UPSTREAM_KILL_PROXY_INSIDE=<tool> (`lookup`, `append`, `append_keyed`) SIGKILLs the proxy inside
the call, after its effect (before the proxy can journal the outcome); UPSTREAM_DIE_INSIDE=<tool>
makes this server exit there instead.
"""

import os
import signal
from pathlib import Path

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

WORK = Path(os.environ["WORK_DIR"])
PROXY_PID = int(os.environ.get("LAUNCHED_BY_PID") or os.getppid())
server = MCPServer("files")


def count(name: str) -> None:
    with open(WORK / "upstream_calls.txt", "a") as calls:
        calls.write(f"{name}\n")


def crash_points(name: str) -> None:
    if os.environ.get("UPSTREAM_KILL_PROXY_INSIDE") == name:
        os.kill(PROXY_PID, signal.SIGKILL)
    if os.environ.get("UPSTREAM_DIE_INSIDE") == name:
        os._exit(1)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(ticket: str) -> str:
    """Look a ticket up."""
    count("lookup")
    crash_points("lookup")
    return f"{ticket}: open"


@server.tool()
def append(line: str) -> str:
    """Append a line to the refunds file."""
    count("append")
    with open(WORK / "effects.txt", "a") as effects:
        effects.write(f"{line}\n")
    crash_points("append")
    return f"appended {line}"


@server.tool()
def append_keyed(line: str, ctx: Context) -> str:
    """Append a line once per idempotency key (the proxy's `_meta` key), like a keyed API."""
    count("append_keyed")
    key = (ctx.request_context.meta or {}).get("intentledger/idempotency_key")
    path = WORK / "effects.txt"
    seen = path.read_text().splitlines() if path.exists() else []
    if f"{line} {key}" not in seen:
        with open(path, "a") as effects:
            effects.write(f"{line} {key}\n")
    crash_points("append_keyed")
    return f"appended {line}"


async def until_released() -> None:
    while not (WORK / "release").exists():
        await anyio.sleep(0.05)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def held(ticket: str) -> str:
    """Look a ticket up in a system that answers only once the test releases it."""
    count("held")
    await until_released()
    return f"{ticket}: held and open"


@server.tool()
async def held_append(line: str) -> str:
    """Append a line, once the test releases the call."""
    count("held_append")
    await until_released()
    with open(WORK / "effects.txt", "a") as effects:
        effects.write(f"{line}\n")
    return f"appended {line}"


@server.tool()
def refuse(reason: str) -> str:
    """Refuse, as a tool does: an `isError: true` result."""
    count("refuse")
    raise ToolError(f"refused: {reason}")


if __name__ == "__main__":
    if os.environ.get("UPSTREAM_HTTP_PORT"):  # streamable HTTP at http://127.0.0.1:PORT/mcp
        server.run("streamable-http", host="127.0.0.1", port=int(os.environ["UPSTREAM_HTTP_PORT"]))
    else:
        (WORK / "proxy.pid").write_text(str(PROXY_PID))
        server.run()
