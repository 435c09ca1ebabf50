"""`intentledger mcp serve`: the ledger's registered tools as an MCP server (writes run on the
ledger's gateway under the step's key)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import mcp_types as types
from mcp.server.lowlevel import Server

from intentledger._ledger import Ledger
from intentledger.errors import ApprovalDenied, LedgerError, StepFailed, StopRun
from intentledger.integrations._core import JournalError, journalable
from intentledger.integrations.mcp.sessions import RUN_META, Runs, run_named, text_result
from intentledger.integrations.mcp.stdio import serve_on_stdio

_JSON_TYPES: dict[str, dict[str, Any]] = {
    "email": {"type": "string", "format": "email"},
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "decimal": {"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]+)?$"},
    "boolean": {"type": "boolean"},
    "list": {"type": "array"},
    "object": {"type": "object"},
}


def _input_schema(arguments: dict[str, Any]) -> dict[str, Any]:
    """A ledger tool's argument description (GET /api/v1/tools/) as a JSON Schema."""
    properties: dict[str, Any] = {}
    for name, field in arguments.items():
        schema: dict[str, Any] = dict(_JSON_TYPES.get(field.get("type", "any"), {}))
        if field.get("type") == "choice":
            schema["enum"] = list(field.get("choices", []))
        for limit, keyword in (
            ("max_length", "maxLength"),
            ("min_value", "minimum"),
            ("max_value", "maximum"),
        ):
            if field.get(limit) is not None:
                schema[keyword] = field[limit]
        if "default" in field:
            schema["default"] = field["default"]
        if field.get("help"):
            schema["description"] = field["help"]
        properties[name] = schema
    required = [name for name, field in arguments.items() if field.get("required")]
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _http_session(ctx: Any) -> str | None:
    """The streamable HTTP session a request belongs to (its Mcp-Session-Id), None on stdio."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    return headers.get("mcp-session-id") if headers is not None else None


class LedgerToolServer:
    """`intentledger mcp serve`: the ledger's registered tools as an MCP server.

    Each `tools/call` is a step of the run the client names in `_meta["intentledger/run"]` (and
    `_meta["intentledger/agent"]`), or of the session's run (`--run`, `--agent`); writes run on
    the ledger's gateway under the step's idempotency key (`enforced_by: ledger`), reads without
    one. Over streamable HTTP a call that names no run belongs to its session's run
    (`mcp-session-<Mcp-Session-Id>`). The runs touched are completed when the client
    disconnects (stdio) or the server stops (HTTP).
    """

    def __init__(self, ledger: Ledger, *, agent: str, run: str | None, worker: str | None) -> None:
        self.ledger = ledger
        self.agent = agent
        self.default_run = run
        self.tools: dict[str, dict[str, Any]] = {}
        self.runs = Runs(
            ledger,
            input={"mcp": "serve"},
            worker=worker,
            session=(agent, run) if run else None,
        )

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        listed = await asyncio.to_thread(self.ledger._transport.tools_list)
        self.tools = {tool["name"]: tool for tool in listed}
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool["name"],
                    description=tool.get("description") or None,
                    input_schema=_input_schema(tool.get("arguments") or {}),
                    annotations=types.ToolAnnotations(read_only_hint=tool["effect"] == "read"),
                )
                for tool in listed
            ]
        )

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        named_agent, named_run = run_named(params)
        session = _http_session(ctx)
        external_id = (
            named_run or self.default_run or (f"mcp-session-{session}" if session else None)
        )
        agent = named_agent or self.agent
        if not external_id:
            return text_result(f"name a run: _meta[{RUN_META!r}] or intentledger mcp serve --run")
        if params.name not in self.tools:
            await self.list_tools(ctx, None)
        tool = self.tools.get(params.name)
        if tool is None:
            return text_result(f"tool_not_found: {params.name}")
        try:
            arguments = journalable(dict(params.arguments or {}), what="arguments")
        except JournalError as refused:
            return text_result(f"validation_error: {refused.message}")
        run = await self.runs.get(agent, external_id)
        if isinstance(run, str):
            return text_result(run)
        self.runs.count(agent, external_id)
        finished = self.runs.started(agent, external_id)
        effect: Literal["read", "write"] = "read" if tool["effect"] == "read" else "write"

        def call() -> Any:  # a write runs on the gateway, under the step's key
            try:
                return run.tool(params.name, arguments, effect=effect)
            finally:
                finished()

        try:
            result = await asyncio.to_thread(call)
        except StepFailed as failed:
            return text_result(json.dumps(failed.result, ensure_ascii=False))
        except StopRun as stop:
            if isinstance(stop, ApprovalDenied):  # this call only: the model may go on
                return text_result(f"{stop.code}: {stop.message}")
            return text_result(self.runs.stop(agent, external_id, stop))
        except LedgerError as refused:
            return text_result(f"{refused.code}: {refused.message}")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
            structured_content=result if isinstance(result, dict) else None,
        )

    async def close(self) -> None:
        await self.runs.close()


async def serve_stdio(
    *, ledger: Ledger, agent: str, run: str | None, worker: str | None = None
) -> int:
    """Serve the ledger's tools over MCP on stdin/stdout until the client disconnects."""
    tools = LedgerToolServer(ledger, agent=agent, run=run, worker=worker)
    server: Server[Any] = Server(
        "intentledger", on_list_tools=tools.list_tools, on_call_tool=tools.call_tool
    )
    try:
        await serve_on_stdio(server)
    finally:
        await tools.close()
    return 0
