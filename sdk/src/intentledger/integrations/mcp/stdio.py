"""MCP over stdin/stdout for the proxy and the server: a line that is not JSON-RPC is answered
with a JSON-RPC error instead of silence."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage


def _parse_error(error: Exception) -> SessionMessage:
    """The answer to a line that is not a JSON-RPC message: -32700 (not JSON) or -32600."""
    code = types.PARSE_ERROR if "json_invalid" in str(error) else types.INVALID_REQUEST
    message = f"malformed MCP message: {error}"[:500]
    return SessionMessage(
        types.JSONRPCError(
            jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=message)
        )
    )


async def serve_on_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (raw_read, write_stream):
        # a line that is not a JSON-RPC message gets a parse error (id null), not silence
        send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def answer_malformed() -> None:
            async with send:
                async for item in raw_read:
                    if isinstance(item, Exception):
                        await write_stream.send(_parse_error(item))
                    else:
                        await send.send(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(answer_malformed)
            await server.run(read_stream, write_stream, server.create_initialization_options())
