"""The streamable HTTP transport of `intentledger mcp serve`: uvicorn, behind a bearer token."""

from __future__ import annotations

import hmac
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcp.server.lowlevel import Server

from intentledger._ledger import Ledger
from intentledger.integrations.mcp.serve import LedgerToolServer

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def serve_http(
    *,
    ledger: Ledger,
    agent: str,
    run: str | None,
    host: str,
    port: int,
    token: str,
    worker: str | None = None,
) -> int:
    """Serve the ledger's tools over streamable HTTP at http://host:port/mcp until stopped.

    Every request must carry `Authorization: Bearer <token>` (any local process could otherwise
    use the ledger token behind it). A call that names no run (`_meta`, `--run`) belongs to its
    MCP session's run (`mcp-session-<id>`); runs are completed when the server stops.
    """
    import uvicorn

    tools = LedgerToolServer(ledger, agent=agent, run=run, worker=worker)
    server: Server[Any] = Server(
        "intentledger", on_list_tools=tools.list_tools, on_call_tool=tools.call_tool
    )
    app = _bearer_required(server.streamable_http_app(host=host), token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")

    class _Server(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises SIGTERM after its shutdown, which would kill us before the runs
            # are completed: stop serving on the signal, then return normally
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    try:
        await _Server(config).serve()
    finally:
        await tools.close()
    return 0


HTTP_TOKEN_ENV = "INTENTLEDGER_MCP_TOKEN"  # noqa: S105 (a variable name)


def _bearer_required(app: Any, token: str) -> Any:
    """`app` behind `Authorization: Bearer <token>`: any other HTTP request gets a 401."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded
