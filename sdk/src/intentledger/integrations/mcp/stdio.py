"""MCP over stdin/stdout for the proxy and the server: a line that is not JSON-RPC is answered
with a JSON-RPC error instead of silence.

When stdin and stdout are pipes (how an MCP client starts a server), they are read and written
on the event loop. The MCP SDK's `stdio_server()` reads each line, writes and flushes each
answer in a worker thread (three thread hand-offs per call, each a wake-up on a busy machine);
anything else (a file, a terminal) takes that path. Either way, while serving, fd 0 reads the
null device and fd 1 writes to stderr, so stray output cannot corrupt the wire.

The end of a pipe is the client leaving (the MCP SDK then cancels the calls in flight); the end
of a file or a terminal's Ctrl-D is the last request read, and every call read before it is
answered before the server stops.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

# no limit on a line's length, as the SDK's own reader has none (a 1 MB argument is one line)
LINE_LIMIT = sys.maxsize


def _parse_error(error: Exception) -> SessionMessage:
    """The answer to a line that is not a JSON-RPC message: -32700 (not JSON) or -32600."""
    code = types.PARSE_ERROR if "json_invalid" in str(error) else types.INVALID_REQUEST
    message = f"malformed MCP message: {error}"[:500]
    return SessionMessage(
        types.JSONRPCError(
            jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=message)
        )
    )


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _PipeLines:
    """The lines read from a pipe, as text (what `stdio_server` iterates)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self.reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _PipeWrites:
    """Text written to a pipe; `flush` waits until the pipe has taken it."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def write(self, text: str) -> None:
        self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self.writer.drain()


@asynccontextmanager
async def _pipe_stdio() -> AsyncIterator[tuple[Any, Any] | None]:
    """Stdin and stdout as streams on the event loop, when both are pipes (else None); fd 0 and
    1 point at the null device and stderr meanwhile, and are restored after."""
    if not (_is_pipe(0) and _is_pipe(1)):
        yield None
        return
    loop = asyncio.get_running_loop()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reading = os.fdopen(wire_in, "rb", buffering=0, closefd=False)
    writing = os.fdopen(wire_out, "wb", buffering=0, closefd=False)
    transports: list[asyncio.BaseTransport] = []
    try:
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), reading
        )
        transports.append(transport)
        out, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, writing)
        transports.append(out)
        out.set_write_buffer_limits(high=0)  # a flush waits until the pipe has taken it all
        yield _PipeLines(reader), _PipeWrites(asyncio.StreamWriter(out, protocol, None, loop))
    finally:
        for each in transports:
            each.close()
        await asyncio.sleep(0)  # the transports let go of their descriptors
        for fd in (wire_in, wire_out):  # shared with whoever started us: as we found them
            os.set_blocking(fd, True)
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)


class _Unanswered:
    """The ids of the requests read and not yet answered, to hold a file's end until they are."""

    def __init__(self) -> None:
        self.ids: set[types.RequestId] = set()
        self.none_left = anyio.Event()
        self.none_left.set()

    def read(self, message: types.JSONRPCMessage) -> None:
        if isinstance(message, types.JSONRPCRequest):
            self.ids.add(message.id)
            self.none_left = anyio.Event()
        elif (
            isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
        ):
            self._settle((message.params or {}).get("requestId"))

    def written(self, message: types.JSONRPCMessage) -> None:
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            self._settle(message.id)

    def _settle(self, request_id: Any) -> None:
        self.ids.discard(request_id)
        if not self.ids:
            self.none_left.set()


async def serve_on_stdio(server: Server[Any]) -> None:
    async with _pipe_stdio() as pipes:
        streams = stdio_server(*pipes) if pipes is not None else stdio_server()
        async with streams as (raw_read, write_stream):
            send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            unanswered = _Unanswered() if pipes is None else None  # a file's end waits for them

            async def read_requests() -> None:
                async with send:
                    async for item in raw_read:
                        if isinstance(item, Exception):  # not JSON-RPC: an error, not silence
                            await write_stream.send(_parse_error(item))
                            continue
                        if unanswered is not None:
                            unanswered.read(item.message)
                        await send.send(item)
                    if unanswered is not None:
                        await unanswered.none_left.wait()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(read_requests)
                answers: Any = write_stream
                if unanswered is not None:
                    answers, answered = anyio.create_memory_object_stream[SessionMessage](0)
                    tasks.start_soon(_write_noting, answered, write_stream, unanswered)
                await server.run(read_stream, answers, server.create_initialization_options())


async def _write_noting(answered: Any, write_stream: Any, unanswered: _Unanswered) -> None:
    """Relays the server's answers to the wire, noting each request answered."""
    async with write_stream, answered:
        async for message in answered:
            unanswered.written(message.message)
            await write_stream.send(message)
