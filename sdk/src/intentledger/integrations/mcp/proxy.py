"""`intentledger mcp proxy`: the ledger in front of an MCP server (stdio command or HTTP URL);
every `tools/call` is a journalled step, its effect decided by an admin's mark, the flags or
the upstream's hint."""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from typing import Any

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from intentledger._ledger import Ledger
from intentledger._run import Run
from intentledger._transport import StepIntent, StepOutcome
from intentledger.errors import ApprovalDenied, LedgerError, LedgerUnavailable, StopRun
from intentledger.integrations._core import JournalError, journal_from_async, journalable
from intentledger.integrations.mcp.config import ToolPolicy
from intentledger.integrations.mcp.sessions import (
    RunCalls,
    Runs,
    Turns,
    UpstreamLost,
    recorded_answer,
    run_named,
    text_result,
)
from intentledger.integrations.mcp.stdio import serve_on_stdio

KEY_META = "intentledger/idempotency_key"


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
        policy: ToolPolicy,
    ) -> None:
        self.upstream = upstream
        self.server_name = server_name
        self.runs = runs
        if runs.session is None:
            raise ValueError("a proxy session has a run of its own (--agent, --run)")
        self.agent, self.default_run = runs.session
        self.policy = policy
        self.tools: dict[str, types.Tool] = {}
        self.marks: dict[str, str] = {}  # tool name -> "read" | "write", set by an admin
        self.lost: UpstreamLost | None = None  # the upstream went away: every call is refused

    def effect(self, name: str) -> tuple[str, Any]:
        """The tool's effect under the policy, with the admins' marks and the upstream's hint."""
        tool = self.tools.get(name)
        hinted = bool(tool and tool.annotations and tool.annotations.read_only_hint)
        return self.policy.effect(name, mark=self.marks.get(name), hinted=hinted)

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
        named_agent, named_run = run_named(params)
        agent, external_id = named_agent or self.agent, named_run or self.default_run
        turns = self.runs.turns_of(agent, external_id)
        ticket = turns.take()  # on arrival, before any await: the order the client sent
        loop = asyncio.get_running_loop()
        handed_over = False
        finished: Callable[[], None] | None = None

        def release() -> None:  # from the call's thread, once its intent is journalled
            with suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(turns.release, ticket)

        try:
            await turns.wait(ticket)
            if self.lost is not None:
                return text_result(f"upstream_lost: {self.lost.message}")
            run = await self.runs.get(agent, external_id)
            if isinstance(run, str):
                return text_result(run)
            self.runs.count(agent, external_id)
            name = params.name
            if name not in self.tools:
                await self.list_tools(ctx, None)
            try:
                arguments = journalable(dict(params.arguments or {}), what="arguments")
            except JournalError as refused:
                return text_result(f"validation_error: {refused.message}")
            effect, enforced_by = self.effect(name)
            step_name = f"{self.server_name}/{name}"
            calls = self.runs.journals[(agent, external_id)]
            index, recorded = calls.claim(step_name, effect, arguments)
            finished = self.runs.started(agent, external_id)
            try:
                ran: Answer | None = None
                running: asyncio.Future[Answer] | None = None
                if recorded is None and effect == "read":
                    try:
                        ran, running = await self._read_first(run, name, arguments, turns, ticket)
                    except BaseException:
                        calls.unclaim(index, None)  # nothing journalled: the index is free
                        raise
                handed_over = True
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
                        ran=ran,
                        running=running,
                        await_on_loop=await_on_loop,
                        release=release,
                        finished=finished,
                    )
                )
            except UpstreamLost as lost:
                self.lost = lost
                return text_result(f"upstream_lost: {lost.message}")
            except ApprovalDenied as denied:  # this call only: the model may go on
                return text_result(f"{denied.code}: {denied.message}")
            except (StopRun, LedgerUnavailable) as stop:
                # fenced, in review, finished, or no ledger: the session writes nothing more
                return text_result(self.runs.stop(agent, external_id, stop))
            except LedgerError as refused:  # this call only
                return text_result(f"{refused.code}: {refused.message}")
        finally:
            if not handed_over:
                turns.release(ticket)
                if finished is not None:
                    finished()

    async def _read_first(
        self, run: Run, name: str, arguments: dict[str, Any], turns: Turns, ticket: int
    ) -> tuple[Answer | None, asyncio.Future[Answer] | None]:
        """A new read, in its turn: the upstream's answer, when it came before any later call
        did (the step is then journalled after it ran, intent and outcome in one call, as the
        SDK journals a read); or the upstream call still running, when a later call came to
        wait for this one's turn (the intent is then journalled first, so the turn passes on
        at once, and the outcome when the upstream answers)."""
        if run._stopped is not None:
            raise run._stopped
        running = asyncio.ensure_future(self._upstream(name, arguments, None))
        behind = turns.behind(ticket)
        try:
            await asyncio.wait((running, behind), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            running.cancel()
            raise
        finally:
            behind.cancel()
        if running.done():
            return running.result(), None  # raises UpstreamLost: nothing is journalled
        # its failure is the step's to report; if the intent is refused nobody awaits it
        running.add_done_callback(lambda done: done.cancelled() or done.exception())
        return None, running

    async def _upstream(self, name: str, arguments: dict[str, Any], key: str | None) -> Answer:
        """The upstream's answer to one call: (status, what the journal records, what the
        client gets). UpstreamLost when the upstream went away (whether it acted is unknown)."""
        meta: Any = {KEY_META: key} if key else None
        try:
            result = await self.upstream.call_tool(name, arguments, meta=meta)
        except MCPError as error:
            if error.code in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT):
                raise UpstreamLost(
                    f"the upstream MCP server went away during {name}: {error}",
                    code="upstream_lost",
                ) from error
            # the upstream answered with a JSON-RPC error: the step's recorded error
            failed = {"error": type(error).__name__, "message": str(error)[:2000]}
            return "error", failed, text_result(f"upstream error: {error}")
        except Exception as lost:
            raise UpstreamLost(
                f"the upstream MCP server went away during {name}: {lost!r}",
                code="upstream_lost",
            ) from lost
        answer = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        status = "error" if result.is_error else "ok"  # isError: the tool's own failure
        return status, answer, types.CallToolResult.model_validate(answer)

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
        ran: Answer | None,
        running: asyncio.Future[Answer] | None,
        await_on_loop: Callable[[Awaitable[Any]], Any],
        release: Callable[[], None],
        finished: Callable[[], None],
    ) -> types.CallToolResult:
        """One call as step `index` (in a worker thread), journalled in the call's turn: a read
        the upstream has answered (`ran`) in one call; any other call by its intent, then the
        upstream called after the turn (or, `running`, a read that was called before it), then
        its outcome once the upstream answered. The client is answered once the step's outcome
        is journalled."""
        step_name = f"{self.server_name}/{name}"
        try:
            if recorded is not None:
                state = recorded["state"]
                if state in ("done", "error"):  # a replay: the journal answers
                    run.replayed += 1
                    return recorded_answer(recorded)
                run._raise_unless_resumable(index, step_name, recorded)
            intent = StepIntent(run.epoch, index, "tool", step_name, effect, arguments, enforced_by)
            if ran is not None:  # a read that ran: intent and outcome in one call
                status, record, answer = ran
                outcome = {"status": status, "result": record, "usage": _NO_USAGE}
                try:
                    run.journal[index] = run._intent(replace(intent, outcome=outcome))
                except BaseException:
                    calls.unclaim(index, recorded)  # e.g. arguments refused: the index is free
                    raise
                run.executed += 1
                return answer
            try:
                step = run._intent(intent)
            except BaseException:
                calls.unclaim(index, recorded)  # e.g. arguments refused: the index is free
                raise
            release()  # the index is the step's now: the next call may journal its own
            if step["state"] == "awaiting_approval":
                run.journal[index] = step
                run._await_approval(index, step_name)
                step = run._intent(intent)  # approved: handed to this worker
            if step["state"] in ("done", "error"):  # reconciled by the server meanwhile
                return recorded_answer(step)
            key = None
            if effect == "write":
                run._check_lease_for_write()
                key = step["idempotency_key"]
            called = running if running is not None else self._upstream(name, arguments, key)
            status, record, answer = await_on_loop(called)
            run.journal[index] = run._outcome(StepOutcome(index, status, record, _NO_USAGE))
            run.executed += 1
            return answer
        finally:
            release()
            finished()


Answer = tuple[str, Any, types.CallToolResult]  # (status, journalled result, the client's answer)
_NO_USAGE = {"input_tokens": 0, "output_tokens": 0}


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
    policy: ToolPolicy | None = None,
) -> int:
    """Serve MCP on stdin/stdout in front of `upstream` (a command line or a streamable HTTP URL)
    until the client disconnects; `policy` says which of its tools are reads and which writes
    it enforces by key."""
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
            policy=policy or ToolPolicy(),
        )
        await runs.get(agent, external_id)  # attach (and recover) before the first call
        server: Server[Any] = Server(
            f"intentledger:{server_name}",
            on_list_tools=gateway.list_tools,
            on_call_tool=gateway.call_tool,
        )
        await serve_on_stdio(server)
        return 0 if await runs.close(gateway.lost) else 1
