"""A run under lease: every step journalled, replayed from the journal after a crash."""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from intentledger._otel import current_traceparent
from intentledger._steps import (
    _accepts_key,
    _denied,
    _matches,
    _normalized,
    _spends,
    _still_executing,
    _ToolRefused,
    _usage_of,
)
from intentledger._transport import StepIntent, StepOutcome, ToolCall
from intentledger.errors import (
    ApprovalDenied,
    ApprovalPending,
    LedgerError,
    LedgerUnavailable,
    NeedsReview,
    NondeterminismError,
    RunFinished,
    StaleLease,
    StepFailed,
    StopRun,
)

if TYPE_CHECKING:
    from intentledger._ledger import Ledger

T = TypeVar("T")

logger = logging.getLogger("intentledger")

Effect = Literal["read", "write"]
EnforcedBy = Literal["ledger", "tool", "nobody"]

_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar(
    "intentledger_run", default=None
)
# one long poll for an approval decision (the server answers at once when people decide)
APPROVAL_POLL_SECONDS = 25
TOOL_REFUSAL_STATUSES = frozenset({400, 404, 409, 502})


@dataclass(frozen=True)
class StepInfo:
    """What `on_step` callbacks see after each step: `replayed` means it did not execute."""

    index: int
    name: str
    kind: str
    effect: str
    state: str
    replayed: bool


def current_run() -> Run:
    """The run whose `with` block is active in this thread (used by the `@tool` decorator)."""
    run = _current.get()
    if run is None:
        raise RuntimeError("No active run: call journalled tools inside `with ledger.run(...)`.")
    return run


class Run:
    """Use as `with ledger.run(...) as run:`; set `run.output` before the block ends.

    On a clean exit the run is completed with `run.output`. An exception fails it, except the
    ones that mean "stop, someone else decides" (StaleLease, NeedsReview, BudgetExceeded,
    RunFinished), a non-determinism (left for recovery, then review) and an unreachable ledger:
    those write nothing and propagate. A run finished with a write step still open (its error
    caught by the agent before its outcome was recorded) is not completed: the ledger sends
    that step to review and the block raises NeedsReview (`details["steps"]`).
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        agent: str | None,
        input: Any,
        external_id: str | None,
        run_id: str | None,
        worker: str,
        ttl_seconds: int,
        on_step: Callable[[Run, StepInfo], None] | None,
        wait_for_approval: bool = True,
    ) -> None:
        if not 5 <= ttl_seconds <= 600:
            raise ValueError("ttl_seconds must be between 5 and 600")
        self._ledger = ledger
        self._transport = ledger._transport
        self.agent = agent
        self.input = input
        self.external_id = external_id
        self.id: str = run_id or ""
        self.worker = worker
        self.ttl_seconds = ttl_seconds
        self.on_step = on_step
        self.wait_for_approval = wait_for_approval
        self.output: Any = None
        self.epoch = 0
        self.recovered = False
        self.info: dict[str, Any] = {}
        self.journal: dict[int, dict[str, Any]] = {}
        self.replayed = 0
        self.executed = 0
        self.lease_seconds = 0.0  # how long the last lease call (with its journal) took
        self._next = 0
        # a write enforced by its tool: its outcome, held to ride on the next call
        # ({index, status, result, usage}; docs/design-notes.md has the crash analysis)
        self._held: StepOutcome | None = None
        self._stopped: StopRun | None = None
        self._lease_deadline = 0.0
        self._lock = threading.Lock()
        self._heartbeat_stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._token: contextvars.Token[Run | None] | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Run:
        if not self.id:
            assert self.agent is not None
            created = self._transport.create_run(
                agent=self.agent,
                input=self.input,
                external_id=self.external_id,
                traceparent=current_traceparent(),
            )
            self.id = created["id"]
        self.lease()
        self._token = _current.set(self)
        self._heartbeat = threading.Thread(
            target=self._beat, name=f"intentledger-heartbeat-{self.id[:8]}", daemon=True
        )
        self._heartbeat.start()
        return self

    def lease(self) -> dict[str, Any]:
        """Acquire the lease: a new epoch fences earlier holders; returns the grant."""
        sent = time.monotonic()
        grant = self._transport.lease(self.id, worker=self.worker, ttl_seconds=self.ttl_seconds)
        self.lease_seconds = time.monotonic() - sent
        self._lease_deadline = sent + self.ttl_seconds
        self.epoch = int(grant["epoch"])
        self.recovered = bool(grant.get("recovered"))
        self.info = grant["run"]
        self.agent = self.info["agent"]
        self.input = self.info["input"]
        self.journal = {int(step["index"]): step for step in grant["journal"]}
        self._next = 0
        self._held = None
        self._stopped = None
        return dict(grant)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._heartbeat_stop.set()
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        failing = isinstance(exc, Exception) and not isinstance(
            exc, StopRun | NondeterminismError | LedgerUnavailable
        )
        if self._stopped is not None or not (exc is None or failing):
            self._offer_held()  # the block stops writing: the held outcome, once, if it lands
        if self._stopped is not None and exc is None:
            raise self._stopped
        if exc is None:
            self._flush()  # finishing over an open write would send it to review
            self.info = self._write(
                self._transport.run_complete, self.id, epoch=self.epoch, output=self.output
            )
        elif failing:
            error = {"type": type(exc).__name__, "message": str(exc)[:2000]}
            try:
                self._flush()
                self.info = self._write(
                    self._transport.run_fail, self.id, epoch=self.epoch, error=error
                )
            except LedgerError as fail_error:
                logger.warning("could not record the failure of run %s: %s", self.id, fail_error)

    # --- the public step calls ------------------------------------------------------------

    @property
    def next_index(self) -> int:
        """The index the next step will get (replayed or new)."""
        return self._next

    @property
    def budget(self) -> dict[str, Any]:
        return dict(self.info.get("budget") or {})

    def tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        effect: Effect = "write",
        enforced_by: EnforcedBy | None = None,
        fn: Callable[..., Any] | None = None,
    ) -> Any:
        """Run a tool once per run, whatever the crashes: the result, replayed or fresh.

        Without `fn` the tool runs on the ledger's gateway with the step's idempotency key
        (`enforced_by` ledger). With `fn`, your callable runs with `**arguments` (write steps
        also get `idempotency_key=` when it accepts it); say `enforced_by="tool"` when it
        honours the key, `"nobody"` when it cannot (a crash inside it then goes to review),
        `"ledger"` only when it forwards the key to `run.gateway` (a wrapper around it).
        """
        args = _normalized(dict(arguments or {}), "arguments")
        if effect not in ("read", "write"):
            raise ValueError("effect must be 'read' or 'write'")
        if effect == "read":
            if enforced_by is not None:
                raise ValueError("enforced_by is for write steps only")
        elif fn is None:
            if enforced_by not in (None, "ledger"):
                raise ValueError("gateway tools are enforced by the ledger")
            enforced_by = "ledger"
        elif enforced_by is None:
            enforced_by = "tool" if _accepts_key(fn) else "nobody"
        elif enforced_by == "ledger" and not _accepts_key(fn):
            raise ValueError(
                "enforced_by='ledger' means your callable forwards idempotency_key to the "
                "ledger's gateway (run.gateway); otherwise it is 'tool' or 'nobody'"
            )
        elif enforced_by not in ("ledger", "tool", "nobody"):
            raise ValueError("enforced_by must be 'ledger', 'tool' or 'nobody'")

        def execute(key: str | None) -> Any:
            if fn is None:
                return self.gateway(name, args, idempotency_key=key)
            if key is not None and _accepts_key(fn):
                return fn(**args, idempotency_key=key)
            return fn(**args)

        return self._step(
            kind="tool",
            name=name,
            effect=effect,
            enforced_by=enforced_by,
            args=args,
            run=execute,
            on_gateway=fn is None,
        )

    def model(
        self,
        fn: Callable[..., Any],
        messages: Any = None,
        *,
        name: str = "model",
        **arguments: Any,
    ) -> Any:
        """A model call, journalled as a read step: replay returns it without spending tokens.

        `fn(messages=..., **arguments)` returns a JSON object; its `usage` ({input_tokens,
        output_tokens, cost_usd?} or OpenAI's prompt/completion_tokens) is charged to the run.
        """
        args = dict(arguments)
        if messages is not None:
            args["messages"] = messages
        args = _normalized(args, "model arguments")
        return self._step(
            kind="model",
            name=name,
            effect="read",
            enforced_by=None,
            args=args,
            run=lambda _key: fn(**args),
        )

    def gateway(
        self, name: str, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> Any:
        """Invoke a registered tool on the ledger's gateway (at most once per key); its result.

        A write's key must be a journalled step's (the ledger refuses others with 409
        `intent_not_journalled`); the gateway records that step's outcome itself.
        """
        self._check_lease_for_write()
        self._flush()  # a held outcome is committed before any effect that follows it
        waited_since = time.monotonic()
        while True:
            try:
                call = ToolCall(name, dict(arguments), idempotency_key, self.epoch)
                return self._transport.tool_invoke(call)
            except LedgerError as error:
                if error.code == "idempotency_in_progress":
                    if _still_executing(error, waited_since):
                        time.sleep(0.2)
                        continue
                    # an execution the server lost (e.g. its database connection died mid-tool)
                    # holds the key: stop without failing the run; recovery decides from the key
                    raise LedgerUnavailable(
                        error.message,
                        code=error.code,
                        status=error.status,
                        details=error.details,
                    ) from error
                if error.status in TOOL_REFUSAL_STATUSES:
                    # the tool refused or failed (stored for the key): a recorded error step
                    raise _ToolRefused(error) from error
                raise

    # --- internals ------------------------------------------------------------------------

    def _raise_unless_resumable(self, index: int, name: str, recorded: dict[str, Any]) -> None:
        """A recorded step that must not run again stops here: `denied` was refused, `unknown`
        may have happened (a person decides), any other state but intent, interrupted or
        awaiting approval means the run is over. Replays (`done`, `error`) are the caller's."""
        state = recorded["state"]
        if state == "denied":
            raise _denied(recorded)
        if state == "unknown":
            raise self._stop(
                NeedsReview(
                    f"Step {index} ({name}) may have happened; a supervisor decides.",
                    code="needs_review",
                    details={"index": index},
                )
            )
        if state not in ("interrupted", "intent", "awaiting_approval"):
            raise self._stop(
                RunFinished(f"Step {index} is {state}.", code="run_finished", details=recorded)
            )

    def _step(
        self,
        *,
        kind: str,
        name: str,
        effect: str,
        enforced_by: str | None,
        args: dict[str, Any],
        run: Callable[[str | None], Any],
        on_gateway: bool = False,
    ) -> Any:
        if self._stopped is not None:
            raise self._stopped
        index = self._next
        intent = StepIntent(self.epoch, index, kind, name, effect, args, enforced_by)
        recorded = self.journal.get(index)
        if recorded is not None:
            if not _matches(recorded, intent):
                # the server compares hashes and has the last word (raises nondeterministic)
                recorded = self._intent(intent)
            state = recorded["state"]
            if state in ("done", "error"):
                self._next += 1
                self.replayed += 1
                self._notify(recorded, replayed=True)
                if state == "error":
                    raise StepFailed(name, index, recorded["result"])
                return recorded["result"]
            if state == "denied":
                self._next += 1
                self.replayed += 1
            self._raise_unless_resumable(index, name, recorded)
        if on_gateway:
            # one call: the ledger journals the intent, runs the tool under the step's key and
            # records its outcome (a crash anywhere in it is recovered from the key record)
            self._flush()  # a gateway step takes no previous_outcome
            step = self._once_approved(self._gateway_step, intent)
            if step["state"] not in ("done", "error"):
                # the ledger did not run it (the run moved on under us): stop, fail nothing
                raise self._stop(
                    StaleLease(
                        f"Step {index} ({name}) is {step['state']}: the ledger did not run it.",
                        code="stale_epoch",
                        details={"index": index, "state": step["state"]},
                    )
                )
            status = "ok" if step["state"] == "done" else "error"
            result, raised = step["result"], None
        elif effect == "read":
            if self._held is not None and _spends(self._held.usage):
                self._flush()  # a budget stop it raises comes before the read spends anything
            status, result, raised = self._execute(run, None)
            outcome = {"status": status, "result": result, "usage": _usage_of(result)}
            step = self._intent(replace(intent, enforced_by=None, outcome=outcome))
        else:
            step = self._once_approved(self._intent, intent)
            raised = None
            if step["state"] in ("done", "error"):  # reconciled by the server meanwhile
                status, result = ("ok" if step["state"] == "done" else "error"), step["result"]
            else:
                self._check_lease_for_write()
                status, result, raised = self._execute(run, step["idempotency_key"])
                if enforced_by == "tool" and status == "ok":
                    # the tool honours the key: a crash before the outcome lands is re-run
                    # under it, so the outcome rides on the next call (notified when it lands)
                    self._held = StepOutcome(index, status, result, _usage_of(result))
                    self.journal[index] = step
                    self._next += 1
                    self.executed += 1
                    return result
                step = self._outcome(StepOutcome(index, status, result, _usage_of(result)))
        self.journal[index] = step
        self._next += 1
        self.executed += 1
        self._notify(step, replayed=False)
        if raised is not None:
            raise raised
        if status == "error":
            raise StepFailed(name, index, result)
        return result

    def _execute(
        self, run: Callable[[str | None], Any], key: str | None
    ) -> tuple[str, Any, Exception | None]:
        """(status, result, the agent's own exception to re-raise once the failure is journalled)."""
        try:
            return "ok", _normalized(run(key), "the step's result"), None
        except _ToolRefused as refused:
            # the gateway's stored failure, as the gateway recorded it for the step
            error = refused.error
            return (
                "error",
                {"error": {"code": error.code, "message": error.message, "details": error.details}},
                None,
            )
        except (StopRun, LedgerError):
            raise
        except Exception as exc:
            return "error", {"error": type(exc).__name__, "message": str(exc)[:2000]}, exc

    def _intent(self, intent: StepIntent) -> dict[str, Any]:
        held = self._held
        if held is not None and held.index != intent.index - 1:
            self._flush()
            held = None
        try:
            step = self._write(
                self._transport.step_record,
                self.id,
                replace(intent, epoch=self.epoch, previous_outcome=held),
            )
        except LedgerError as error:
            stopped = error.details.get("step")
            if error.code == "budget_exceeded" and isinstance(stopped, dict):
                self.journal[int(stopped["index"])] = stopped
                if held is not None and stopped["index"] == held.index:
                    self._held = None  # recorded: the carried outcome stopped the run
            raise
        if held is not None:
            self._held = None
            landed = {**self.journal[held.index], "state": "done", "result": held.result}
            self.journal[held.index] = landed
            self._notify(landed, replayed=False)
        return step

    def _once_approved(
        self, send: Callable[[StepIntent], dict[str, Any]], intent: StepIntent
    ) -> dict[str, Any]:
        """The step as `send` journals it. Where an approval rule holds it (202), wait for people
        to decide; once approved, the same call again hands the step to this worker (on the
        gateway: runs the tool), once, under the step's key. A denial moves the run past the
        step, which keeps its index."""
        try:
            step = send(intent)
            if step["state"] == "awaiting_approval":
                self.journal[intent.index] = step
                self._await_approval(intent.index, intent.name)
                step = send(intent)
        except ApprovalDenied:
            self._next += 1  # the agent may go on
            raise
        return step

    def _await_approval(self, index: int, name: str) -> None:
        """Long-poll the step until people decide; the heartbeat thread keeps the lease."""
        if not self.wait_for_approval:
            raise self._stop(
                ApprovalPending(
                    f"Step {index} ({name}) waits for approval; the run stops until it is decided.",
                    code="approval_pending",
                    details={"index": index},
                )
            )
        logger.info("run %s: step %s (%s) waits for approval", self.id, index, name)
        while True:
            if self._stopped is not None:
                raise self._stopped
            step = self._transport.step_wait(self.id, index, wait=APPROVAL_POLL_SECONDS)
            self.journal[index] = step
            if step["state"] == "denied":
                raise _denied(step)
            if step["state"] != "awaiting_approval":
                return

    def _gateway_step(self, intent: StepIntent) -> Any:
        """A step with `invoke`: the step done or error, in one call of the transport."""
        if intent.effect == "write":
            self._check_lease_for_write()
        waited_since = time.monotonic()
        while True:
            try:
                return self._write(
                    self._transport.step_record,
                    self.id,
                    replace(intent, epoch=self.epoch, enforced_by=None, invoke=True),
                )
            except LedgerError as error:
                if error.code == "budget_exceeded" and isinstance(error.details.get("step"), dict):
                    self.journal[intent.index] = error.details["step"]
                if error.code != "idempotency_in_progress":
                    raise
                if _still_executing(error, waited_since):
                    time.sleep(0.2)
                    continue
                # an execution the server lost holds the key: recovery decides from the key
                raise LedgerUnavailable(
                    error.message, code=error.code, status=error.status, details=error.details
                ) from error

    def _flush(self) -> None:
        """The held outcome by its own call (the outcome call), when no call can carry it."""
        held, self._held = self._held, None
        if held is not None:
            step = self._outcome(held)
            self.journal[held.index] = step
            self._notify(step, replayed=False)

    def _offer_held(self) -> None:
        """The block stops writing with an outcome held: offer it once, past the stop fence
        (the kernel refuses it under a stale epoch; a cancelled run takes it). Whatever
        happens, recovery re-runs the step under its key."""
        held, self._held = self._held, None
        if held is None:
            return
        try:
            self._transport.step_outcome(self.id, held, epoch=self.epoch)
        except Exception as error:  # best effort: the step's key covers it
            logger.info(
                "run %s: held outcome of step %s not recorded: %s", self.id, held.index, error
            )

    def _outcome(self, outcome: StepOutcome) -> dict[str, Any]:
        try:
            answer = self._write(self._transport.step_outcome, self.id, outcome, epoch=self.epoch)
        except LedgerError as error:
            if error.code == "budget_exceeded" and isinstance(error.details.get("step"), dict):
                # the outcome is recorded (usage is a fact); the run stops here
                self.journal[outcome.index] = error.details["step"]
            raise
        if isinstance(answer.get("budget"), dict):
            self.info["budget"] = answer["budget"]
        step: dict[str, Any] = answer["step"]
        return step

    def _write(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Every write is fenced: after a refusal that means "stop", nothing more is sent."""
        if self._stopped is not None:
            raise self._stopped
        try:
            return call(*args, **kwargs)
        except StopRun as stop:
            raise self._stop(stop) from None

    def _stop(self, stop: StopRun) -> StopRun:
        with self._lock:
            if self._stopped is None:
                self._stopped = stop
        self._heartbeat_stop.set()
        return stop

    def _check_lease_for_write(self) -> None:
        """Before an effect: if our lease may have lapsed (a pause, a partition), confirm it."""
        if self._stopped is not None:
            raise self._stopped
        if time.monotonic() > self._lease_deadline - self.ttl_seconds / 3:
            self._heartbeat_once()
            if self._stopped is not None:
                raise self._stopped

    def _heartbeat_once(self) -> None:
        sent = time.monotonic()
        try:
            self._write(self._transport.heartbeat, self.id, epoch=self.epoch)
            self._lease_deadline = sent + self.ttl_seconds
        except StopRun:
            logger.warning("run %s: lease lost (epoch %s); stopping", self.id, self.epoch)

    def _beat(self) -> None:
        interval = max(1.0, self.ttl_seconds / 3)
        while not self._heartbeat_stop.wait(interval):
            try:
                self._heartbeat_once()
            except LedgerError as error:
                logger.warning("run %s: heartbeat failed: %s", self.id, error)
            except Exception as error:  # the client closed under us at exit: nothing to do
                if not self._heartbeat_stop.is_set():
                    logger.warning("run %s: heartbeat error: %r", self.id, error)
                return
            if self._stopped is not None:
                return

    def _notify(self, step: dict[str, Any], *, replayed: bool) -> None:
        if self.on_step is not None:
            self.on_step(
                self,
                StepInfo(
                    index=int(step["index"]),
                    name=step["name"],
                    kind=step["kind"],
                    effect=step["effect"],
                    state=step["state"],
                    replayed=replayed,
                ),
            )


__all__ = ["Run", "StaleLease", "StepInfo", "current_run"]
