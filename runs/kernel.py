"""The journal kernel's Python half: each hot worker call is one SQL function, one round trip.

The functions live in runs/sql/ledger.sql (via migrations). They take the run's row lock, check
the epoch and the status, apply the transition, append the events to the hash chain and update
the counters in one statement. Python renders the canonical text of what it already knows (the
actor, the time, each payload) so the hash the database computes is over exactly the bytes
runs.chain recomputes from the stored rows; the database adds the run id, seq and type.

An answer is either the step (or lease) or a refusal `(code, details)`, raised as an
ApplicationError. A refusal that changed state (a recorded step crossed a budget) was committed
with its event before it is raised, as `BudgetStopped` carrying the recorded step; nothing else
is ever half done.
"""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import connection, models, transaction

from runs import clock
from runs.api_errors import ApplicationError, invalid
from runs.canonical import (
    GENESIS_HASH,
    canonical_json,
    idempotency_key,
    sha256_hex,
)
from runs.constants import (
    FINAL_STATUSES,
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    Effect,
    EnforcedBy,
    EventType,
    RunStatus,
    StatusReason,
    StepState,
)
from runs.lock_objects import run_for_update
from runs.models import Run, Step

# --- the chain and the state machines, for the transitions that are not hot ----------------
#
# Recovery, reviews, limits, completion: each runs inside `transition()`, which takes the run's
# lock, and changes state only through run_move / step_move (the tables in runs.constants) and
# event_append, so every change commits with its event. The hot calls do the same in SQL; the
# database holds both to the same tables (ledger.sql's generated ledger_transition_allowed and
# its guard triggers), and every event, here or there, is hashed by ledger_event_append.


class InvalidTransition(Exception):
    """A transition outside the tables in runs.constants: a bug, never a client error."""


def event_append(
    run: Run, *, type: EventType, payload: dict[str, Any], actor: str, at: datetime
) -> str:
    """Append to the run's chain through the kernel's `ledger_event_append`, so the hash is
    computed in one place (the hot calls use it too); answers the new head. The caller holds the
    run lock and saves the run afterwards (its event_seq and event_head move here)."""
    seq = run.event_seq + 1
    prev = run.event_head or GENESIS_HASH
    prefix = event_prefix(actor, at)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ledger_event_append(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                run.pk,
                run.journal_month,
                run.team_id,
                seq,
                prev,
                type,
                _text(payload),
                prefix,
                actor,
                at,
            ],
        )
        (digest,) = _one(cursor)
    run.event_seq = seq
    run.event_head = digest
    return str(digest)


def run_move(
    run: Run, to: RunStatus | str, *, reason: StatusReason | str = StatusReason.NONE
) -> None:
    if to not in RUN_TRANSITIONS[run.status]:
        raise InvalidTransition(f"run {run.status} -> {to}")
    run.status = to
    run.status_reason = reason
    if to in FINAL_STATUSES:
        run.finished_at = clock.now()
        run.lease_worker = None
        run.lease_expires_at = None


def step_move(step: Step, to: StepState | str) -> None:
    if to not in STEP_TRANSITIONS[step.state]:
        raise InvalidTransition(f"step {step.state} -> {to}")
    step.state = to


@dataclass
class Transition:
    """The locked run of one transaction, and the refusal to answer once it has committed."""

    run: Run
    actor: str
    now: datetime
    refusal: ApplicationError | None = None

    def event(self, type: EventType, payload: dict[str, Any], *, actor: str | None = None) -> str:
        return event_append(
            self.run, type=type, payload=payload, actor=actor or self.actor, at=self.now
        )

    def refuse(self, error: ApplicationError) -> None:
        """Answer `error`, keeping what this transition changed (a budget stop, a recovery)."""
        self.refusal = error


@contextmanager
def transition(run: UUID | str | Run, *, actor: str) -> Iterator[Transition]:
    """Lock the run, let the caller move it, save it, commit, then raise any refusal.

    An exception inside rolls everything back (a refusal that changed nothing); `refuse()` is
    for the refusals whose state change must be kept, so there is one way to do each.
    """
    with transaction.atomic():
        locked = run_for_update(run.pk if isinstance(run, Run) else run)
        step = Transition(run=locked, actor=actor, now=clock.now())
        yield step
        locked.save()
    if step.refusal is not None:
        raise step.refusal


def _one(cursor: Any) -> tuple[Any, ...]:
    row = cursor.fetchone()
    assert row is not None
    return tuple(row)


# --- the kernel's rules, asked about a locked row -------------------------------------------
#
# The services outside the hot calls do not keep a Python copy of a kernel rule: they ask the
# kernel about the run's row as the database holds it. The caller holds the run's row lock and
# has saved every change it made to the run before asking.


@dataclass(frozen=True)
class ExceededLimit:
    """A limit the run has reached: the canonical payload of its budget_exceeded event (`text`)
    and the same as the refusal's details (in the order the hot calls answer them)."""

    text: str
    details: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.details["limit"])


def exceeded_limit(run_id: UUID | str, *, now: datetime, next_step: bool) -> ExceededLimit | None:
    """The first limit the saved run has reached, or None (`ledger_exceeded_limit`).
    `next_step`: would one more intent fit?"""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p, p::jsonb FROM (SELECT ledger_exceeded_limit(r, %s, %s) AS p"
            " FROM runs_run r WHERE r.id = %s) limited",
            [now, next_step, run_id],
        )
        text, details = _one(cursor)
    return None if text is None else ExceededLimit(text=text, details=_json(details))


def run_budget_stop(run: Run, limit: ExceededLimit, *, actor: str, now: datetime) -> None:
    """The saved run stops at `limit` (`ledger_run_budget_stop`: its status moves and its
    budget_exceeded event is appended in SQL), and `run` learns the new status and head."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.status, s.status_reason, s.event_seq, s.event_head, "
            "ledger_run_counters_save(s) FROM runs_run r "
            "CROSS JOIN LATERAL ledger_run_budget_stop(r, %s, %s, %s, %s) s WHERE r.id = %s",
            [limit.text, now, event_prefix(actor, now), actor, run.pk],
        )
        run.status, run.status_reason, run.event_seq, run.event_head, _ = _one(cursor)


def _text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")


def event_prefix(actor: str, at: datetime) -> str:
    """The canonical event body up to its payload: keys sort as actor, at, payload, run, seq, type."""
    return '{"actor":' + _text(actor) + ',"at":' + _text(at.isoformat()) + ',"payload":'


def money(value: Decimal) -> str:
    """US dollars as the API shows them: a string with six decimals."""
    return f"{value:.6f}"


def usage_of(usage: dict[str, Any] | None) -> tuple[int, int, Decimal]:
    usage = usage or {}
    return (
        int(usage.get("input_tokens") or 0),
        int(usage.get("output_tokens") or 0),
        Decimal(str(usage.get("cost_usd") or 0)),
    )


def outcome_payload(*, index: int, result_text: str, usage: tuple[int, int, Decimal]) -> str:
    """step_done / step_error: the result bound by its hash, the usage by value."""
    return _text(
        {
            "index": index,
            "result_hash": sha256_hex(result_text.encode("utf-8")),
            "usage": {
                "input_tokens": usage[0],
                "output_tokens": usage[1],
                "cost_usd": money(usage[2]),
            },
        }
    )


# --- refusals -------------------------------------------------------------------------------

_MESSAGES = {
    "stale_epoch": "Another worker holds the run now; stop and write nothing more.",
    "needs_review": "The run waits for a supervisor's review.",
    "run_finished": "The run is {status}.",
    "out_of_order": "The next step is {expected_index}; steps are journalled in order, without gaps.",
    "nondeterministic": "Step {index} was recorded with another name or other arguments; the agent did not replay the same decisions.",
    "lease_held": "Another worker holds the lease.",
}


def refusal(code: str, details: dict[str, Any] | None, *, run_id: UUID | str) -> ApplicationError:
    """The kernel's (code, details) as the API's error, with the message a person reads."""
    details = dict(details or {})
    if code == "not_found":
        return ApplicationError("not_found", f"No run {run_id}.", status_code=404)
    if code == "step_not_found":
        return ApplicationError(
            "not_found",
            f"Step {details['index']} has no intent.",
            status_code=404,
            details=details,
        )
    if code == "budget_exceeded":
        return ApplicationError(
            "budget_exceeded", f"The run's {details['limit']} budget is spent.", details=details
        )
    if code == "needs_review" and details.get("limit") == "recoveries":
        return ApplicationError(
            "needs_review",
            "The run's recovery budget is spent; it waits for a supervisor.",
            details=details,
        )
    if code == "needs_review" and "index" in details:
        return ApplicationError(
            "needs_review",
            f"Step {details['index']} may have happened; a supervisor decides.",
            details=details,
        )
    if code == "approval_denied":
        if details.get("action") == "expire":
            message = f"Step {details['index']} was not approved in time (expired {details['at']}); it must not run."
        else:
            message = f"Step {details['index']} was denied by {details['by']} at {details['at']}: {details['note']}"
        return ApplicationError("approval_denied", message, details=details)
    if code == "outcome_conflict":
        if details.pop("different", False):
            message = f"Step {details['index']} already has a different outcome."
        else:
            message = f"Step {details['index']} is {details['state']}, not waiting for an outcome."
        return ApplicationError("outcome_conflict", message, details=details)
    return ApplicationError(code, _MESSAGES[code].format(**details), details=details)


# --- answers --------------------------------------------------------------------------------

_RUN_BUDGET_FIELDS = (
    "limit_steps",
    "limit_tokens",
    "limit_cost_usd",
    "limit_wall_seconds",
    "limit_recoveries",
    "used_steps",
    "used_tokens",
    "used_cost_usd",
    "used_recoveries",
    "deadline",
)


def _json(value: Any) -> Any:
    """jsonb arrives as text (Django registers a text loader for it)."""
    return json.loads(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class StepAnswer:
    step: Step
    run: Run  # the budget columns only: enough for budget_of()
    created: bool


class BudgetStopped(ApplicationError):
    """The step was recorded (committed with its event), and its usage stopped the run at a
    limit: the worker must stop. `answer` is the step as recorded, for the refusal's details."""

    def __init__(self, details: dict[str, Any], answer: StepAnswer) -> None:
        super().__init__(
            "budget_exceeded",
            f"Outcome recorded; the run's {details['limit']} budget is now spent and the run stops.",
            details=details,
        )
        self.answer = answer

    def answered(self, body: dict[str, Any]) -> ApplicationError:
        """This refusal with the recorded step's representation beside the limit."""
        return ApplicationError(
            self.code, self.message, status_code=self.status_code, details={**self.details, **body}
        )


class _Rows[M: models.Model]:
    """How one model's columns in a statement's answer become instances: `model.from_db` with
    the values its fields' database converters give (what a queryset does for its rows), the
    plan read once per statement from the cursor's column names. The columns are the model's
    own (`(a.step).*`), so a column added to the table is read with no word here."""

    def __init__(self, model: type[M], prefix: str = "") -> None:
        self.model = model
        self.prefix = prefix
        self.fields = {f"{prefix}{field.column}": field for field in model._meta.concrete_fields}

    def plan(self, names: list[str]) -> list[tuple[int, str, list[Any]]]:
        """(position in the row, attname, converters) for each of the model's columns present,
        in the model's field order (the order `from_db` takes values in)."""
        order = {field.attname: n for n, field in enumerate(self.model._meta.concrete_fields)}
        found = [
            (position, field.attname, field.get_db_converters(connection))
            for position, name in enumerate(names)
            if (field := self.fields.get(name)) is not None
        ]
        return sorted(found, key=lambda item: order[item[1]])

    def instance(self, row: tuple[Any, ...], plan: list[tuple[int, str, list[Any]]]) -> M:
        attnames, values = [], []
        for position, attname, converters in plan:
            value = row[position]
            for convert in converters:
                value = convert(value, None, connection)
            attnames.append(attname)
            values.append(value)
        return self.model.from_db(connection.alias, attnames, values)


_STEP_ROWS = _Rows(Step)
_RUN_ROWS = _Rows(Run, prefix="run__")
# the run's columns an answer carries: its budget (runs.representations.budget_of) and its id
_RUN_COLUMNS = ", ".join(f"(a.run).{name} AS run__{name}" for name in ("id", *_RUN_BUDGET_FIELDS))


def _statement(function: str, arity: int) -> str:
    placeholders = ", ".join(["%s"] * arity)
    return (
        f"SELECT a.code, a.details, a.created, (a.step).*, {_RUN_COLUMNS} "  # noqa: S608
        f"FROM {function}({placeholders}) a"
    )


_INTENT_SQL = _statement("ledger_step_intent", 22)
_OUTCOME_SQL = _statement("ledger_step_outcome", 12)
_OUTCOME_INTENT_SQL = _statement("ledger_step_outcome_intent", 29)


@dataclass(frozen=True)
class _Row:
    """One answer of a step call: its refusal, and the step and run when there are some."""

    code: str | None
    details: Any
    created: bool | None
    step: Step | None
    run: Run | None


# a statement's plans, read once: cursor.description builds a Column per column per call
_PLANS: dict[str, tuple[list[Any], list[Any]]] = {}


def _rows(statement: str, params: list[Any]) -> list[_Row]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
        assert rows
        plans = _PLANS.get(statement)
        if plans is None:
            assert cursor.description is not None
            names = [c.name for c in cursor.description]
            plans = _PLANS[statement] = (_STEP_ROWS.plan(names), _RUN_ROWS.plan(names))
    step_plan, run_plan = plans
    return [
        _Row(
            code=row[0],
            details=_json(row[1]),
            created=row[2],
            step=None if row[2] is None else _STEP_ROWS.instance(row, step_plan),
            run=None if row[2] is None else _RUN_ROWS.instance(row, run_plan),
        )
        for row in rows
    ]


def _answer(row: _Row, *, run_id: UUID | str, known: dict[str, Any]) -> StepAnswer:
    if row.created is None:
        raise refusal(row.code or "not_found", row.details, run_id=run_id)
    assert row.step is not None and row.run is not None
    step = row.step
    fresh = row.created  # else the step as recorded before this call
    if step.arguments is None:  # not sent back: what the caller sent
        step.arguments = known["arguments"]
    if fresh and "result" in known:
        step.result = known["result"]
    answer = StepAnswer(step=step, run=row.run, created=fresh)
    if row.code == "budget_exceeded":
        raise BudgetStopped(row.details, answer)
    return answer


# --- the hot calls --------------------------------------------------------------------------


def step_intent(
    *,
    run_id: UUID | str,
    epoch: int,
    index: int,
    kind: str,
    name: str,
    effect: str,
    arguments: Any,
    enforced_by: str | None = None,
    outcome: dict[str, Any] | None = None,
    previous_outcome: dict[str, Any] | None = None,
    actor: str,
) -> StepAnswer:
    """Journal a step's intent before it runs (or, for a read step, intent and outcome at once).

    Index `step_count` is a new step and consumes one step of budget; a lower index is a replay
    (returned as recorded, consuming nothing) or the re-execution of an interrupted step. A
    write step takes two calls (no outcome here) and, naming no enforcer, is enforced by nobody;
    a read step names none. `previous_outcome` ({index, status, result, usage}) is the outcome
    of the step before, a write its tool enforces, recorded first in the same transaction
    (docs/design-notes.md has the crash analysis): its refusal refuses the call with nothing
    written, its budget stop is raised as the outcome call raises it.
    """
    if effect == Effect.WRITE and outcome is not None:
        raise invalid(
            "outcome",
            "A write step takes two calls: its intent before the tool runs, its outcome after.",
            "Not allowed on a write step.",
        )
    if effect == Effect.READ and enforced_by is not None:
        raise invalid(
            "enforced_by", "Only write steps name who enforces them.", "Not allowed on a read step."
        )
    if effect == Effect.WRITE and enforced_by is None:
        enforced_by = EnforcedBy.NOBODY
    args_text = _text(arguments)
    args_hash = sha256_hex(args_text.encode("utf-8"))
    key = idempotency_key(run_id=run_id, index=index, name=name, args_hash=args_hash)
    now = clock.now()
    intent_payload = _text(
        {
            "index": index,
            "kind": kind,
            "name": name,
            "effect": effect,
            "enforced_by": enforced_by,
            "arguments_hash": args_hash,
            "idempotency_key": key,
        }
    )
    reopen_payload = _text({"index": index, "name": name, "idempotency_key": key})
    ok, result_text, usage, done_payload = True, None, (0, 0, Decimal(0)), None
    known: dict[str, Any] = {"arguments": arguments}
    if outcome is not None:
        ok = outcome.get("status", "ok") == "ok"
        known["result"] = outcome.get("result")
        result_text = _text(known["result"])
        usage = usage_of(outcome.get("usage"))
        done_payload = outcome_payload(index=index, result_text=result_text, usage=usage)
    params = [
        str(run_id),
        epoch,
        index,
        kind,
        name,
        effect,
        enforced_by,
        args_text,
        args_hash,
        key,
        now,
        actor,
        event_prefix(actor, now),
        intent_payload,
        reopen_payload,
        outcome is not None,
        ok,
        None if known.get("result") is None else result_text,
        usage[0],
        usage[1],
        usage[2],
        done_payload,
    ]
    if previous_outcome is None:
        (row,) = _rows(_INTENT_SQL, params)
        return _answer(row, run_id=run_id, known=known)
    previous = previous_outcome
    carried = [previous["index"], *_outcome_params(previous, index=previous["index"])]
    rows = _rows(_OUTCOME_INTENT_SQL, params + carried)
    if rows[0].code == "outcome_not_carried":
        raise invalid(
            "previous_outcome",
            f"Step {previous['index']} is not a write enforced by its tool; send its outcome "
            "with its own call.",
            "Only the outcome of a write step enforced_by tool rides on the next call.",
        )
    _answer(rows[0], run_id=run_id, known={"result": previous["result"]})
    return _answer(rows[1], run_id=run_id, known=known)


def _outcome_params(outcome: dict[str, Any], *, index: int) -> list[Any]:
    """(ok, result, input tokens, output tokens, cost, the step_done/step_error payload)."""
    result = outcome.get("result")
    result_text = _text(result)
    spent = usage_of(outcome.get("usage"))
    return [
        outcome.get("status", "ok") == "ok",
        None if result is None else result_text,
        spent[0],
        spent[1],
        spent[2],
        outcome_payload(index=index, result_text=result_text, usage=spent),
    ]


def step_outcome(
    *,
    run_id: UUID | str,
    index: int,
    epoch: int,
    status: str,
    result: Any,
    usage: dict[str, Any] | None = None,
    actor: str,
) -> StepAnswer:
    """Record what a step did. The same outcome twice is answered as recorded; a different one
    is a conflict.

    Usage is a fact (the tokens were spent), so an outcome that crosses a limit is recorded and
    then the run moves to budget_exceeded and BudgetStopped is raised: 409, the worker stops.
    """
    if not 0 <= index < 2**31:  # no such step can exist (the column is an integer)
        raise refusal("step_not_found", {"index": index}, run_id=run_id)
    now = clock.now()
    ok, result_text, spent_in, spent_out, spent_cost, payload = _outcome_params(
        {"status": status, "result": result, "usage": usage}, index=index
    )
    (row,) = _rows(
        _OUTCOME_SQL,
        [
            str(run_id),
            epoch,
            index,
            ok,
            result_text,
            spent_in,
            spent_out,
            spent_cost,
            now,
            actor,
            event_prefix(actor, now),
            payload,
        ],
    )
    return _answer(row, run_id=run_id, known={"result": result})


@dataclass(frozen=True)
class HeartbeatAnswer:
    status: str
    epoch: int
    expires_at: datetime | None


def heartbeat(*, run_id: UUID | str, epoch: int) -> HeartbeatAnswer:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT code, details, status, epoch, expires_at FROM ledger_heartbeat(%s, %s, %s)",
            [str(run_id), epoch, clock.now()],
        )
        row = cursor.fetchone()
    assert row is not None
    code, details, status, current, expires_at = row
    if code is not None:
        raise refusal(code, _json(details), run_id=run_id)
    return HeartbeatAnswer(status=status, epoch=current, expires_at=expires_at)


class AskToolSide(Exception):
    """The statement needs the tool side's answers about these steps first (its recovery rules
    do): nothing was changed. `steps`: [{index, name, idempotency_key, enforced_by}]."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        super().__init__(f"ask the tool side about steps {[s['index'] for s in steps]}")
        self.steps = steps


@dataclass(frozen=True)
class RunAnswer:
    """A run-level call's answer: the run as the statement left it (a refusal that changed
    state included) and the code and details of a refusal, or of the success."""

    run: Run
    code: str | None
    details: dict[str, Any]


def _run_call(function: str, params: list[Any]) -> RunAnswer:
    """One run-level kernel statement (`function` answers code, details and the run row)."""
    placeholders = ", ".join(["%s"] * len(params))
    (run,) = Run.objects.raw(
        "SELECT k.code AS kernel_code, k.details AS kernel_details, (k.run).* "  # noqa: S608
        f"FROM {function}({placeholders}) k",
        params,
    )
    code = run.kernel_code  # type: ignore[attr-defined]
    details = _json(run.kernel_details)  # type: ignore[attr-defined]
    if code == "ask":
        raise AskToolSide(list(details))
    return RunAnswer(run=run, code=code, details=dict(details or {}))


def lease(
    *,
    run_id: UUID | str,
    worker: str,
    ttl_seconds: int,
    actor: str,
    answers: dict[str, Any],
    lookup_tools: list[str],
) -> tuple[Run, bool]:
    """`ledger_lease`: the grant, after the recovery rules when the holder was lost; the run as
    it is now and whether it was a recovery. `answers`: what the tool side said about the
    steps a previous call asked about (AskToolSide)."""
    now = clock.now()
    answer = _run_call(
        "ledger_lease",
        [
            str(run_id),
            worker,
            _text(worker),
            ttl_seconds,
            now,
            actor,
            event_prefix(actor, now),
            json.dumps(answers),
            lookup_tools,
        ],
    )
    if answer.code is not None:
        raise refusal(answer.code, answer.details, run_id=run_id)
    return answer.run, bool(answer.details["recovered"])


def lease_expire(
    *, run_id: UUID | str, actor: str, answers: dict[str, Any], lookup_tools: list[str]
) -> Run | None:
    """`ledger_lease_expire`, the reaper's: the run interrupted (or sent to review) after its
    lease expired, or None when it had not (or another transaction holds it)."""
    now = clock.now()
    answer = _run_call(
        "ledger_lease_expire",
        [str(run_id), now, actor, event_prefix(actor, now), json.dumps(answers), lookup_tools],
    )
    return None if answer.code == "not_expired" else answer.run


def run_finish(*, run_id: UUID | str, epoch: int, to: str, value: Any, actor: str) -> Run:
    """`ledger_run_finish`: complete (`to` completed, `value` the output) or fail (failed, the
    error) a running run; a write still open sends it to review instead (409 needs_review,
    kept)."""
    now = clock.now()
    answer = _run_call(
        "ledger_run_finish",
        [str(run_id), epoch, to, _text(value), now, actor, event_prefix(actor, now)],
    )
    if answer.code == "needs_review" and "steps" in answer.details:  # this call sent it there
        steps = answer.details["steps"]
        raise ApplicationError(
            "needs_review",
            f"The run was not {to}: its write step(s) {steps} are still open and may "
            "have happened; a supervisor reviews them.",
            details=answer.details,
        )
    if answer.code == "not_running":
        raise ApplicationError(
            "stale_epoch", "The run is not running under this lease.", details=answer.details
        )
    if answer.code is not None:
        raise refusal(answer.code, answer.details, run_id=run_id)
    return answer.run


__all__ = [
    "AskToolSide",
    "BudgetStopped",
    "EventType",
    "ExceededLimit",
    "HeartbeatAnswer",
    "InvalidTransition",
    "RunAnswer",
    "StepAnswer",
    "Transition",
    "event_append",
    "event_prefix",
    "exceeded_limit",
    "heartbeat",
    "lease",
    "lease_expire",
    "refusal",
    "run_budget_stop",
    "run_finish",
    "run_move",
    "step_intent",
    "step_move",
    "step_outcome",
    "transition",
]
