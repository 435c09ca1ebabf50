"""The MCP gateway, both ways: the ledger in front of any MCP server, and the ledger's own tools
as an MCP server. Every `tools/call` is a journalled step.

    intentledger mcp proxy --upstream "python files_server.py" --agent desk --run ticket-42
    intentledger mcp proxy --upstream http://files.internal:8000/mcp --agent desk --run ticket-42
    intentledger mcp serve --agent desk [--run ticket-42] [--http 127.0.0.1:8765 --http-token T]

`proxy` speaks MCP on its stdin/stdout to the client, and to the upstream over stdio (a command
line, started as its child) or streamable HTTP (a URL). One proxy session is one ledger run
(`--agent`, `--run` as its external id, so a restarted proxy attaches to the same run), completed
when the client disconnects with every call answered. A client that disconnects while a call is
still in flight leaves the run open (recovery decides; a write that may have happened goes to
review). A `--run` whose run is finished (an app's config starts every session with the same
`--run`) continues in the next run of its series: `<run>#2`, `<run>#3`, ... Calls may come
concurrently: each takes the next step index in the order it arrived (its intent journalled in
turn), runs on the upstream beside the others, and after a crash a re-sent call is matched to
its recorded step by name and arguments, in whatever order it comes. Each `tools/call` is a step
named `<upstream server>/<tool>`:

- a tool is a write unless an admin marked it read in the dashboard ("MCP tools": the proxy
  reports the upstream's tools to the ledger at each `tools/list` and gets the marks back), or,
  unmarked, the upstream annotates it `readOnlyHint` or `--read TOOL` says so (`--write TOOL`
  overrides an annotation: annotations are hints, not trusted; an admin's mark overrides both);
- every call carries the step's idempotency key in `_meta["intentledger/idempotency_key"]`;
  writes are `enforced_by: nobody` (a crash between the upstream's answer and the journalled
  outcome sends the step to the review queue) unless `--keyed TOOL` says the upstream honours
  that key (`enforced_by: tool`: the step is re-executed under the same key);
- a replayed call answers the recorded result without reaching the upstream; an upstream result
  with `isError: true` is journalled as an `error` step; tools are listed without their output
  schema (a step resolved by a supervisor has only a text answer);
- an upstream that dies mid-call leaves the step `intent` (recovery decides) and the proxy
  answers that call, and every later one, with an error;
- a run that needs review (or is finished, or a ledger that cannot be reached) answers every
  `tools/call` with an error saying so; a line that is not JSON-RPC gets a JSON-RPC error.

`serve` lists the ledger's registered tools (`LedgerToolServer`); writes run on the ledger's
gateway under the step's key.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import json
import os
import secrets
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from intentledger._ledger import Ledger
from intentledger._run import Run
from intentledger.errors import (
    LedgerError,
    LedgerUnavailable,
    RunFinished,
    StepFailed,
    StopRun,
)
from intentledger.integrations._core import JournalError, journal_from_async, journalable

# a run in one of these takes no more steps: a session's series continues in the next run
FINISHED_STATUSES = frozenset({"completed", "failed", "abandoned", "cancelled"})

KEY_META = "intentledger/idempotency_key"


class UpstreamLost(LedgerUnavailable):
    """The upstream MCP server went away mid-call: whether it acted is unknown; nothing recorded."""


def _text(message: str, *, error: bool = True) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=error
    )


RUN_META, AGENT_META = "intentledger/run", "intentledger/agent"


def _named_run(params: Any) -> tuple[str | None, str | None]:
    """(agent, external id) a client names in a request's `_meta`, either possibly None."""
    meta: dict[str, Any] = dict(getattr(params, "meta", None) or {})
    agent, run = meta.get(AGENT_META), meta.get(RUN_META)
    return (str(agent) if agent else None), (str(run) if run else None)


class Turns:
    """Lets the calls of one run journal their intents one at a time, in the order they arrived.

    A call takes its ticket when its request arrives (before any await), waits for its turn,
    journals its intent and releases the turn; the upstream's work then runs concurrently with
    the calls after it. `release` is idempotent and must run on the event loop.
    """

    def __init__(self) -> None:
        self.issued = 0
        self.serving = 0
        self.finished: set[int] = set()
        self.events: dict[int, asyncio.Event] = {}

    def take(self) -> int:
        ticket = self.issued
        self.issued += 1
        self.events[ticket] = asyncio.Event()
        if ticket == self.serving:
            self.events[ticket].set()
        return ticket

    async def wait(self, ticket: int) -> None:
        await self.events[ticket].wait()

    def release(self, ticket: int) -> None:
        if ticket < self.serving or ticket in self.finished:
            return
        self.finished.add(ticket)
        while self.serving in self.finished:
            self.finished.discard(self.serving)
            self.events.pop(self.serving, None)
            self.serving += 1
        if self.serving in self.events:
            self.events[self.serving].set()


class RunCalls:
    """Which step index each `tools/call` of one run gets: its turn's, or a recorded step's.

    A call that matches a recorded step no call of this session has claimed yet (same name,
    effect and arguments; the earliest such) is that step again: a replay after a crash answers
    from the journal, or re-executes an interrupted step under its key, whatever order the
    client re-sends its calls in. Any other call is a new step at the next index. Claims are
    made under the run's turn (`Turns`), so two calls never get one index.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self.unclaimed: dict[int, dict[str, Any]] = dict(sorted(run.journal.items()))
        self.next_index = max(run.journal) + 1 if run.journal else 0

    def claim(
        self, name: str, effect: str, arguments: dict[str, Any]
    ) -> tuple[int, dict[str, Any] | None]:
        wanted = _canonical_json(arguments)
        for index, step in self.unclaimed.items():
            if (step["kind"], step["name"], step["effect"]) == ("tool", name, effect) and (
                _canonical_json(step["arguments"]) == wanted
            ):
                del self.unclaimed[index]
                return index, step
        index = self.next_index
        self.next_index += 1
        return index, None

    def unclaim(self, index: int, recorded: dict[str, Any] | None) -> None:
        """The claim's intent was refused (nothing journalled): the next call may have it.
        Called before the claim's turn is released, so no later claim has been made."""
        if recorded is not None:
            self.unclaimed = dict(sorted({**self.unclaimed, index: recorded}.items()))
        elif index == self.next_index - 1:
            self.next_index = index


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class CallsInFlight(StopRun):
    """The session ended with calls whose outcome is not journalled: the run is left open."""


# how long a session's end waits for calls still running before it leaves their run open
CLOSE_GRACE_SECONDS = 3.0
SERIES_SEPARATOR = "#"


class Runs:
    """The ledger runs one MCP session writes to, by (agent, external id).

    Each is entered on first use in a context of its own (a run's `with` sets a context
    variable, and is left in the same context) and left when the session ends: completed with
    the number of its tool calls, or, once stopped (in review, fenced, its upstream lost), with
    nothing more written. A run with a call still in flight when the session ends (its outcome
    not journalled: the client went away while the upstream worked) is not completed: it is left
    open for recovery (a lease that lapses; the recovery rules send a write that may have
    happened to review). A run the ledger refused stays refused for the session.

    The session's own run (`session`: `--agent`, `--run`) is a series: when the run named
    `--run` is finished (a previous session completed it), the session continues in the next
    run of the series, `<run>#2`, `<run>#3`, ..., the first that is not finished; a restarted
    session finds an unfinished one (left by a crash) and attaches to it.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        input: Any,
        worker: str | None,
        session: tuple[str, str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.input = input
        self.worker = worker
        self.session = session
        self.entered: dict[tuple[str, str], tuple[Run, contextvars.Context]] = {}
        self.journals: dict[tuple[str, str], RunCalls] = {}
        self.refused: dict[tuple[str, str], str] = {}
        self.stopped: dict[tuple[str, str], StopRun] = {}
        self.calls: dict[tuple[str, str], int] = {}
        self.turns: dict[tuple[str, str], Turns] = {}
        self.left_open: dict[tuple[str, str], str] = {}
        self.in_flight: dict[tuple[str, str], set[asyncio.Future[None]]] = {}

    def turns_of(self, agent: str, external_id: str) -> Turns:
        return self.turns.setdefault((agent, external_id), Turns())

    async def get(self, agent: str, external_id: str) -> Run | str:
        """The run, or why it refuses calls (`code: message`)."""
        key = (agent, external_id)
        if key in self.refused:
            return self.refused[key]
        if key not in self.entered:
            context = contextvars.copy_context()
            run = self.ledger.run(agent, self.input, external_id=external_id, worker=self.worker)
            try:
                try:
                    await asyncio.to_thread(context.run, run.__enter__)
                except RunFinished:
                    if key != self.session:
                        raise
                    current = await asyncio.to_thread(self._series_current, agent, external_id)
                    run = self.ledger.run(
                        agent, self.input, external_id=current, worker=self.worker
                    )
                    await asyncio.to_thread(context.run, run.__enter__)
            except LedgerError as refused:  # in review, finished, unreachable
                self.refused[key] = f"{refused.code}: {refused.message}"
                return self.refused[key]
            self.entered[key] = (run, context)
            self.journals[key] = RunCalls(run)
        return self.entered[key][0]

    def _series_current(self, agent: str, base: str) -> str:
        """The external id a session named `base` continues in: the last run of the series
        (`base`, `base#2`, ...) unless it is finished, then the next one."""

        def named(number: int) -> str:
            return base if number == 1 else f"{base}{SERIES_SEPARATOR}{number}"

        def status(number: int) -> str | None:
            found = self.ledger._transport.find_runs(
                agent=agent, external_id=named(number), limit=1
            )
            return str(found[0]["status"]) if found else None

        last, missing = 1, 2  # `base` exists (it is finished); find the last one by doubling
        while status(missing) is not None:
            last, missing = missing, missing * 2
        while missing - last > 1:  # then halving: every number up to the last one exists
            middle = (last + missing) // 2
            if status(middle) is None:
                missing = middle
            else:
                last = middle
        return named(last + 1 if status(last) in FINISHED_STATUSES else last)

    def count(self, agent: str, external_id: str) -> None:
        key = (agent, external_id)
        self.calls[key] = self.calls.get(key, 0) + 1

    def stop(self, agent: str, external_id: str, stop: LedgerError) -> str:
        """The run must write nothing more (a person or recovery decides); refuse its calls."""
        key = (agent, external_id)
        if isinstance(stop, StopRun):
            self.stopped[key] = stop
        self.refused[key] = f"{stop.code}: {stop.message}"
        return self.refused[key]

    def started(self, agent: str, external_id: str) -> Callable[[], None]:
        """A call of the run is in flight until the returned function is called (any thread)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        calls = self.in_flight.setdefault((agent, external_id), set())
        calls.add(done)

        def finish() -> None:
            calls.discard(done)
            if not done.done():
                done.set_result(None)

        def finished() -> None:
            with suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(finish)

        return finished

    async def close(self, lost: UpstreamLost | None = None) -> bool:
        """Leave every run; True when every run the session named was completed."""
        pending = {call for calls in self.in_flight.values() for call in calls}
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_GRACE_SECONDS)
        for key, (run, context) in self.entered.items():
            stop: LedgerError | None = lost or self.stopped.get(key)
            unfinished = len(self.in_flight.get(key, ()))
            if stop is None and unfinished:
                stop = CallsInFlight(
                    f"the client went away with {unfinished} tools/call in flight: run {run.id} "
                    "is left open for recovery (a write that may have happened goes to review)",
                    code="calls_in_flight",
                )
                self.left_open[key] = stop.message
            if stop is None:
                run.output = {"tool_calls": self.calls.get(key, 0)}
            try:
                await asyncio.to_thread(
                    context.run, run.__exit__, type(stop) if stop else None, stop, None
                )
            except LedgerError as refused:
                self.refused[key] = f"{refused.code}: {refused.message}"
        for message in self.left_open.values():
            print(f"intentledger mcp: {message}", file=sys.stderr)
        return lost is None and not self.refused and not self.left_open


def _recorded_answer(step: dict[str, Any]) -> types.CallToolResult:
    """What the journal says a call answered: the upstream's own result when it has one."""
    result = step.get("result")
    if isinstance(result, dict) and "content" in result:
        return types.CallToolResult.model_validate(result)
    # e.g. a supervisor's "sent" ({"resolved_as": "sent"}): what the journal knows, as text
    return _text(json.dumps(result, ensure_ascii=False), error=step["state"] == "error")


class Gateway:
    """One proxy session: the upstream client session, its runs and the tool policy.

    Calls go to the run the client names in `_meta["intentledger/run"]` (and
    `"intentledger/agent"`), or to the session's run (`--agent`, `--run`). A client may send
    calls concurrently: each takes its run's next turn on arrival, journals its intent in that
    turn and runs on the upstream concurrently with the others.
    """

    def __init__(
        self,
        upstream: ClientSession,
        *,
        server_name: str,
        runs: Runs,
        agent: str,
        default_run: str,
        read: Iterable[str] = (),
        write: Iterable[str] = (),
        keyed: Iterable[str] = (),
    ) -> None:
        self.upstream = upstream
        self.server_name = server_name
        self.runs = runs
        self.agent, self.default_run = agent, default_run
        self.read, self.write, self.keyed = set(read), set(write), set(keyed)
        self.tools: dict[str, types.Tool] = {}
        self.marks: dict[str, str] = {}  # tool name -> "read" | "write", set by an admin
        self.lost: UpstreamLost | None = None  # the upstream went away: every call is refused

    def effect(self, name: str) -> tuple[str, Any]:
        """An admin's mark (the dashboard) first, then `--read`/`--write`, then the hint."""
        write = ("write", "tool" if name in self.keyed else "nobody")
        mark = self.marks.get(name)
        if mark:
            return ("read", None) if mark == "read" else write
        tool = self.tools.get(name)
        hinted = bool(tool and tool.annotations and tool.annotations.read_only_hint)
        if name in self.read or (hinted and name not in self.write):
            return "read", None
        return write

    def report(self, tools: list[types.Tool]) -> dict[str, str]:
        """Tell the ledger what the upstream lists (the dashboard shows it); the admins' marks."""
        reported = [
            {
                "name": tool.name,
                "read_only_hint": bool(tool.annotations and tool.annotations.read_only_hint),
            }
            for tool in tools
        ]
        marked = self.runs.ledger._transport.mcp_tools_report(
            server=self.server_name, tools=reported
        )
        return {tool["name"]: tool["mark"] for tool in marked if tool["mark"]}

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        listed = await self.upstream.list_tools()
        self.tools = {tool.name: tool for tool in listed.tools}
        self.marks = await asyncio.to_thread(self.report, list(listed.tools))
        # no output schemas downstream: a step a supervisor resolved as "sent" has no structured
        # result to give, and a client would refuse a text-only answer to a tool that has one
        tools = [tool.model_copy(update={"output_schema": None}) for tool in listed.tools]
        return listed.model_copy(update={"tools": tools})

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        named_agent, named_run = _named_run(params)
        agent, external_id = named_agent or self.agent, named_run or self.default_run
        turns = self.runs.turns_of(agent, external_id)
        ticket = turns.take()  # on arrival, before any await: the order the client sent
        loop = asyncio.get_running_loop()
        handed_over = False

        def release() -> None:  # from the call's thread, once its intent is journalled
            with suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(turns.release, ticket)

        try:
            await turns.wait(ticket)
            if self.lost is not None:
                return _text(f"upstream_lost: {self.lost.message}")
            run = await self.runs.get(agent, external_id)
            if isinstance(run, str):
                return _text(run)
            self.runs.count(agent, external_id)
            name = params.name
            if name not in self.tools:
                await self.list_tools(ctx, None)
            try:
                arguments = journalable(dict(params.arguments or {}), what="arguments")
            except JournalError as refused:
                return _text(f"validation_error: {refused.message}")
            effect, enforced_by = self.effect(name)
            step_name = f"{self.server_name}/{name}"
            calls = self.runs.journals[(agent, external_id)]
            index, recorded = calls.claim(step_name, effect, arguments)
            finished = self.runs.started(agent, external_id)
            handed_over = True
            try:
                return await journal_from_async(
                    lambda await_on_loop: self._step(
                        run,
                        calls,
                        index,
                        recorded,
                        name,
                        arguments,
                        effect,
                        enforced_by,
                        await_on_loop=await_on_loop,
                        release=release,
                        finished=finished,
                    )
                )
            except UpstreamLost as lost:
                self.lost = lost
                return _text(f"upstream_lost: {lost.message}")
            except (StopRun, LedgerUnavailable) as stop:
                # fenced, in review, finished, or no ledger: the session writes nothing more
                return _text(self.runs.stop(agent, external_id, stop))
            except LedgerError as refused:  # e.g. approval_denied: this call only
                return _text(f"{refused.code}: {refused.message}")
        finally:
            if not handed_over:
                turns.release(ticket)

    def _step(
        self,
        run: Run,
        calls: RunCalls,
        index: int,
        recorded: dict[str, Any] | None,
        name: str,
        arguments: dict[str, Any],
        effect: str,
        enforced_by: Any,
        *,
        await_on_loop: Callable[[Awaitable[Any]], Any],
        release: Callable[[], None],
        finished: Callable[[], None],
    ) -> types.CallToolResult:
        """One call as step `index` (in a worker thread): its intent journalled in the call's
        turn, the upstream called after the turn, the outcome journalled after it answered."""
        step_name = f"{self.server_name}/{name}"
        try:
            if recorded is not None:
                state = recorded["state"]
                if state in ("done", "error"):  # a replay: the journal answers
                    run.replayed += 1
                    return _recorded_answer(recorded)
                run._raise_unless_resumable(index, step_name, recorded)
            intent = (index, "tool", step_name, effect, enforced_by, arguments)
            try:
                step = run._intent(*intent, outcome=None)
            except BaseException:
                calls.unclaim(index, recorded)  # e.g. arguments refused: the index is free
                raise
            release()  # the index is the step's now: the next call may journal its own
            if step["state"] == "awaiting_approval":
                run.journal[index] = step
                run._await_approval(index, step_name)
                step = run._intent(*intent, outcome=None)  # approved: handed to this worker
            if step["state"] in ("done", "error"):  # reconciled by the server meanwhile
                return _recorded_answer(step)
            key = None
            if effect == "write":
                run._check_lease_for_write()
                key = step["idempotency_key"]
            meta: Any = {KEY_META: key} if key else None
            try:
                result = await_on_loop(self.upstream.call_tool(name, arguments, meta=meta))
            except MCPError as error:
                if error.code in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT):
                    raise UpstreamLost(
                        f"the upstream MCP server went away during {name}: {error}",
                        code="upstream_lost",
                    ) from error
                # the upstream answered with a JSON-RPC error: the step's recorded error
                failed = {"error": type(error).__name__, "message": str(error)[:2000]}
                run.journal[index] = run._outcome(index, "error", failed, _NO_USAGE)
                return _text(f"upstream error: {error}")
            except Exception as lost:
                raise UpstreamLost(
                    f"the upstream MCP server went away during {name}: {lost!r}",
                    code="upstream_lost",
                ) from lost
            answer = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            status = "error" if result.is_error else "ok"  # isError: the tool's own failure
            run.journal[index] = run._outcome(index, status, answer, _NO_USAGE)
            run.executed += 1
            return types.CallToolResult.model_validate(answer)
        finally:
            release()
            finished()


_NO_USAGE = {"input_tokens": 0, "output_tokens": 0}


def _parse_error(error: Exception) -> SessionMessage:
    """The answer to a line that is not a JSON-RPC message: -32700 (not JSON) or -32600."""
    code = types.PARSE_ERROR if "json_invalid" in str(error) else types.INVALID_REQUEST
    message = f"malformed MCP message: {error}"[:500]
    return SessionMessage(
        types.JSONRPCError(
            jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=message)
        )
    )


@asynccontextmanager
async def _connect(upstream: str) -> AsyncIterator[Any]:
    """The upstream's stream pair: a streamable HTTP URL, or a command started over stdio."""
    if upstream.startswith(("http://", "https://")):
        async with streamable_http_client(upstream) as streams:
            yield streams
        return
    argv = shlex.split(upstream)
    if not argv:
        raise ValueError("--upstream needs a command or a URL")
    env = {k: v for k, v in os.environ.items() if k != "INTENTLEDGER_TOKEN"}
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    async with stdio_client(params) as streams:
        yield streams


async def proxy_stdio(
    upstream: str,
    *,
    ledger: Ledger,
    agent: str,
    external_id: str,
    worker: str | None = None,
    read: Iterable[str] = (),
    write: Iterable[str] = (),
    keyed: Iterable[str] = (),
) -> int:
    """Serve MCP on stdin/stdout in front of `upstream` (a command line or a streamable HTTP URL)
    until the client disconnects."""
    async with _connect(upstream) as (up_read, up_write), ClientSession(up_read, up_write) as up:
        initialized = await up.initialize()
        server_name = initialized.server_info.name or "upstream"
        runs = Runs(
            ledger,
            input={"mcp_upstream": server_name},
            worker=worker,
            session=(agent, external_id),
        )
        gateway = Gateway(
            up,
            server_name=server_name,
            runs=runs,
            agent=agent,
            default_run=external_id,
            read=read,
            write=write,
            keyed=keyed,
        )
        await runs.get(agent, external_id)  # attach (and recover) before the first call
        server: Server[Any] = Server(
            f"intentledger:{server_name}",
            on_list_tools=gateway.list_tools,
            on_call_tool=gateway.call_tool,
        )
        await _serve_on_stdio(server)
        return 0 if await runs.close(gateway.lost) else 1


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


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
        named_agent, named_run = _named_run(params)
        session = _http_session(ctx)
        external_id = (
            named_run or self.default_run or (f"mcp-session-{session}" if session else None)
        )
        agent = named_agent or self.agent
        if not external_id:
            return _text(f"name a run: _meta[{RUN_META!r}] or intentledger mcp serve --run")
        if params.name not in self.tools:
            await self.list_tools(ctx, None)
        tool = self.tools.get(params.name)
        if tool is None:
            return _text(f"tool_not_found: {params.name}")
        try:
            arguments = journalable(dict(params.arguments or {}), what="arguments")
        except JournalError as refused:
            return _text(f"validation_error: {refused.message}")
        run = await self.runs.get(agent, external_id)
        if isinstance(run, str):
            return _text(run)
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
            return _text(json.dumps(failed.result, ensure_ascii=False))
        except StopRun as stop:
            return _text(self.runs.stop(agent, external_id, stop))
        except LedgerError as refused:
            return _text(f"{refused.code}: {refused.message}")
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
        await _serve_on_stdio(server)
    finally:
        await tools.close()
    return 0


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


async def _serve_on_stdio(server: Server[Any]) -> None:
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


def serve_main(args: Any) -> int:
    with Ledger(args.ledger_url, args.ledger_token) as ledger:
        if args.http:
            host, _, port = args.http.rpartition(":")
            token = args.http_token or os.environ.get("INTENTLEDGER_MCP_TOKEN") or ""
            if not token:
                token = secrets.token_urlsafe(32)
                print(
                    f"intentledger mcp serve: clients send 'Authorization: Bearer {token}' "
                    f"(set --http-token or {HTTP_TOKEN_ENV} to choose it)",
                    file=sys.stderr,
                    flush=True,
                )
            return asyncio.run(
                serve_http(
                    ledger=ledger,
                    agent=args.agent,
                    run=args.run,
                    host=host or "127.0.0.1",
                    port=int(port),
                    token=token,
                    worker=args.worker,
                )
            )
        return asyncio.run(
            serve_stdio(ledger=ledger, agent=args.agent, run=args.run, worker=args.worker)
        )


def proxy_main(args: Any) -> int:
    upstream = args.upstream.strip()
    if not upstream:
        raise SystemExit("--upstream needs a command or a URL")
    with Ledger(args.ledger_url, args.ledger_token) as ledger:
        return asyncio.run(
            proxy_stdio(
                upstream,
                ledger=ledger,
                agent=args.agent,
                external_id=args.run,
                worker=args.worker,
                read=args.read,
                write=args.write,
                keyed=args.keyed,
            )
        )


__all__ = [
    "Gateway",
    "LedgerToolServer",
    "Runs",
    "UpstreamLost",
    "proxy_main",
    "proxy_stdio",
    "serve_http",
    "serve_main",
    "serve_stdio",
]
