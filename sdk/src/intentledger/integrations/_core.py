"""What every framework integration shares: journalable values, tool effects, the step's key.

A framework hands the integration Python objects; the journal stores JSON. `journalable` turns
a value into the JSON the journal will hand back on replay, or refuses it with a
`JournalError` (code `validation_error`) that names the field, before any effect.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from intentledger._run import EnforcedBy, Run
from intentledger.errors import LedgerError

_step_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "intentledger_step_key", default=None
)


class JournalError(LedgerError):
    """A framework value the journal cannot store (code `validation_error`, `details` name it)."""


def step_key() -> str:
    """The idempotency key of the write step now executing (inside a journalled tool).

    A tool marked `enforced_by="tool"` hands it to the system it writes to. A tool marked
    `enforced_by="ledger"` has no key of its own: each gateway call it makes is a step with its
    own key (`current_run().tool(name, arguments)`).
    """
    key = _step_key.get()
    if key is None:
        raise RuntimeError(
            "step_key() is only set inside a journalled write tool enforced by the tool itself "
            "(a tool enforced by the ledger calls current_run().tool(name, arguments) instead)"
        )
    return key


@contextmanager
def _keyed(key: str | None) -> Iterator[None]:
    token = _step_key.set(key)
    try:
        yield
    finally:
        _step_key.reset(token)


async def journal_from_async[T](fn: Callable[[Callable[[Awaitable[Any]], Any]], T]) -> T:
    """Run the blocking journal call `fn(await_on_loop)` in a worker thread, from async code.

    The SDK is synchronous (its heartbeat is a thread); async frameworks must not block their
    event loop on it. Inside `fn`, `await_on_loop(awaitable)` runs the framework's own coroutine
    (the model request, the tool) back on the calling loop and returns its result.
    """
    loop = asyncio.get_running_loop()

    async def awaited(awaitable: Awaitable[Any]) -> Any:
        return await awaitable

    def await_on_loop(awaitable: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(awaited(awaitable), loop).result()

    return await asyncio.to_thread(fn, await_on_loop)


async def model_step_from_async[T](
    run: Run, ask: Callable[[], Awaitable[Any]], journal: Callable[[Callable[[], Any]], T]
) -> T:
    """A model step from async code: `journal(answer)` calls `run.model` with `answer()` as its
    effect, and `ask()` is the framework's model request.

    When no step is recorded at the run's next index (the common case: not a replay), the step
    will execute, so the model is asked on the loop first and only the journal call goes to a
    worker thread: one hop there and back, not two. A recorded index takes `journal_from_async`
    (the recorded answer, without asking the model)."""
    if run.journal.get(run.next_index) is None:
        answer = await ask()
        return await asyncio.to_thread(journal, lambda: answer)
    return await journal_from_async(lambda await_on_loop: journal(lambda: await_on_loop(ask())))


async def read_tool_from_async(
    run: Run, ask: Callable[[], Awaitable[Any]], journal: Callable[[Callable[[], Any]], Any]
) -> Any:
    """A read tool step from async code: `journal(execute)` calls `journal_tool` with `execute()`
    as its effect, and `ask()` is the framework's tool coroutine.

    Like `model_step_from_async`: a read is journalled after it ran, intent and outcome in one
    call, so when no step is recorded at the run's next index the tool runs on the loop first and
    only the journal call goes to a worker thread (one hop, not two); its exception, if it raised,
    is raised again inside the step, which records it. Only for frameworks that run one tool call
    at a time (the index must not move between the check and the call)."""
    if run.journal.get(run.next_index) is not None:
        return await journal_from_async(lambda await_on_loop: journal(lambda: await_on_loop(ask())))
    try:
        result = await ask()
    except Exception as exc:
        failed = exc

        def execute() -> Any:
            raise failed

        return await asyncio.to_thread(journal, execute)
    return await asyncio.to_thread(journal, lambda: result)


def to_json(value: Any, fallback: Callable[[Any], Any] | None = None) -> Any:
    """`value` as the journal hands it back (a JSON round trip); TypeError/ValueError if not."""
    return json.loads(json.dumps(value, allow_nan=False, default=fallback))


def journalable(
    values: Mapping[str, Any], *, what: str, fallback: Callable[[Any], Any] | None = None
) -> dict[str, Any]:
    """Each field of `values` as JSON, or a `JournalError` naming the first field that is not."""
    out: dict[str, Any] = {}
    for field, value in values.items():
        try:
            out[str(field)] = to_json(value, fallback)
        except (TypeError, ValueError) as exc:
            raise JournalError(
                f"{what}.{field} cannot be journalled: {exc}",
                code="validation_error",
                details={f"{what}.{field}": [f"not JSON-serialisable: {type(value).__name__}"]},
            ) from exc
    return out


def digest(value: Any) -> str:
    """A short stable hash of a JSON value (what a model step records instead of the prompt).

    Model steps record the digest of the conversation so far (user, assistant and tool turns, not
    the system prompt or instructions, which may say today's date): a replay that asks about a
    different conversation at a recorded index is refused as nondeterministic by the ledger.
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# how long a tool call waits for an earlier call of the same response that has not started
ORDER_WAIT_SECONDS = 10.0


class CallOrder:
    """Lets one model response's tool calls into the journal one at a time, in the model's order.

    Frameworks run a response's tool calls concurrently (a thread pool, `asyncio.gather`); the
    journal's indices must not depend on which one wins, or a replay would meet different steps
    at recorded indices. Each call waits until every earlier call of the response is journalled.
    An earlier call the framework has not even started after `ORDER_WAIT_SECONDS` is taken as
    never coming (it skipped it: an approval, a guardrail) and no longer waited for; one that
    has started is always waited for, however slow.
    Blocking: call `wait_for` from a worker thread, never on an event loop.
    """

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.arrived: set[str] = set()  # calls the framework has started (waiting or running)
        self.turn = threading.Condition()

    def expect(self, call_ids: Iterable[str]) -> None:
        with self.turn:
            self.pending = [str(call_id) for call_id in call_ids]
            self.arrived = set()
            self.turn.notify_all()

    def _my_turn(self, call_id: str) -> bool:
        return call_id not in self.pending or self.pending[0] == call_id

    def wait_for(self, call_id: str) -> None:
        with self.turn:
            self.arrived.add(call_id)
            while not self.turn.wait_for(lambda: self._my_turn(call_id), ORDER_WAIT_SECONDS):
                earlier = self.pending[: self.pending.index(call_id)]
                never_coming = [other for other in earlier if other not in self.arrived]
                for other in never_coming:
                    self.pending.remove(other)
                if never_coming:
                    self.turn.notify_all()

    def done(self, call_id: str) -> None:
        with self.turn:
            if call_id in self.pending:
                self.pending.remove(call_id)
            self.arrived.discard(call_id)
            self.turn.notify_all()


def tool_effect(metadata: Mapping[str, Any] | None) -> tuple[str, EnforcedBy | None]:
    """(effect, enforced_by) from a tool's metadata: a write enforced by nobody unless marked.

    `{"effect": "read"}` marks a read; `{"enforced_by": "tool"}` a write whose tool honours
    `step_key()`; `{"enforced_by": "ledger"}` one whose every effect is a call of the ledger's
    own tools (`current_run().tool(name, arguments)`), each a gateway step of its own.
    """
    metadata = metadata or {}
    effect = metadata.get("effect", "write")
    if effect not in ("read", "write"):
        raise ValueError(f"tool metadata effect must be 'read' or 'write', not {effect!r}")
    if effect == "read":
        return "read", None
    enforced_by = metadata.get("enforced_by", "nobody")
    if enforced_by not in ("ledger", "tool", "nobody"):
        raise ValueError(f"enforced_by must be 'ledger', 'tool' or 'nobody', not {enforced_by!r}")
    return "write", enforced_by


def journal_tool(
    run: Run,
    name: str,
    arguments: dict[str, Any],
    execute: Callable[[], Any],
    *,
    effect: str,
    enforced_by: EnforcedBy | None,
    result_to_json: Callable[[Any], Any] | None = None,
) -> Any:
    """One tool call as one step: `execute()` runs at most once per recorded step.

    `arguments` must already be journalable. The result is stored as JSON (`result_to_json`
    converts framework objects first); the recorded JSON is what a replay returns.

    A write enforced by the ledger is not a step of its own: its effects are the ledger's tools,
    which it calls with `current_run().tool(name, arguments)`, each one a gateway step (journalled
    with its own key, run once by the ledger, recovered from that key after a crash). The ledger
    refuses a key whose step is not the gateway tool itself, so a framework tool cannot lend its
    key to a gateway call; instead it runs again after a restart and its gateway steps answer
    from the journal (so it must do nothing but compute from what they return).
    """
    if effect == "write" and enforced_by == "ledger":
        with _keyed(None):
            return execute()  # not journalled: the same value again after a restart

    def call(idempotency_key: str | None = None, **_: Any) -> Any:
        with _keyed(idempotency_key):
            result = execute()
        try:
            return to_json(result, result_to_json)
        except (TypeError, ValueError):
            # the effect happened: record what we can say about it rather than an error step
            return {"repr": repr(result)[:2000]}

    if effect == "read":
        return run.tool(name, arguments, effect="read", fn=lambda **_: call(None))
    return run.tool(name, arguments, effect="write", enforced_by=enforced_by, fn=call)
