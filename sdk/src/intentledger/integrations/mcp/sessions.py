"""The runs of an MCP session: a session's series of runs, one turn at a time per run for
journalling intents, calls matched to their recorded steps after a crash."""

from __future__ import annotations

import asyncio
import contextvars
import json
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import mcp_types as types

from intentledger._ledger import Ledger
from intentledger._run import Run
from intentledger.errors import LedgerError, LedgerUnavailable, RunFinished, StopRun

# a run in one of these takes no more steps: a session's series continues in the next run
FINISHED_STATUSES = frozenset({"completed", "failed", "abandoned", "cancelled"})


class UpstreamLost(LedgerUnavailable):
    """The upstream MCP server went away mid-call: whether it acted is unknown; nothing recorded."""


def text_result(message: str, *, error: bool = True) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=error
    )


RUN_META, AGENT_META = "intentledger/run", "intentledger/agent"


def run_named(params: Any) -> tuple[str | None, str | None]:
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
        self.watchers: list[tuple[int, asyncio.Future[None]]] = []

    def take(self) -> int:
        ticket = self.issued
        self.issued += 1
        self.events[ticket] = asyncio.Event()
        if ticket == self.serving:
            self.events[ticket].set()
        watching, self.watchers = self.watchers, []
        for before, arrived in watching:
            if arrived.done():
                continue
            if ticket > before:
                arrived.set_result(None)
            else:
                self.watchers.append((before, arrived))
        return ticket

    def behind(self, ticket: int) -> asyncio.Future[None]:
        """Done once a call that arrived after `ticket` has taken its ticket (it waits)."""
        arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.issued > ticket + 1:
            arrived.set_result(None)
        else:
            self.watchers.append((ticket, arrived))
        return arrived

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


def recorded_answer(step: dict[str, Any]) -> types.CallToolResult:
    """What the journal says a call answered: the upstream's own result when it has one."""
    result = step.get("result")
    if isinstance(result, dict) and "content" in result:
        return types.CallToolResult.model_validate(result)
    # e.g. a supervisor's "sent" ({"resolved_as": "sent"}): what the journal knows, as text
    return text_result(json.dumps(result, ensure_ascii=False), error=step["state"] == "error")
