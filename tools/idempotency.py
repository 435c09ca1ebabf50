"""Enforced idempotency keys: a tool runs at most once per key (docs/api.md, "Tool gateway").

Two transactions, as Stripe and the IETF Idempotency-Key draft do it:

1. reserve: `INSERT ... ON CONFLICT (key) DO NOTHING`. The unique index, not a check-then-insert,
   decides which of N concurrent requests executes; the others read the committed row and get the
   stored response, 409 `idempotency_in_progress` or 422 `idempotency_key_reused`.
2. complete: the tool runs inside a transaction that ends with a guarded update of the key to
   `completed` with its response, so the rows a tool writes (a ticket, an OutboundEmail) commit
   together with the key's completion or not at all.

A tool that raises ends the key `failed` with the error stored, and a retry with the same key gets
that stored failure back (Stripe replays its stored 500s): the tool may have done part of its work
before raising, so running it again under the same key would be a guess. Another attempt takes a
new key (for the journal: a new step). A process that dies while the tool runs leaves the key
`in_progress`; once its lock is older than TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS it is `stale`,
which the journal's recovery turns into an `unknown` step for a supervisor.
"""

import functools
import inspect
import json
import logging
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F

from runs import clock
from runs.api_errors import ApplicationError, error_body
from runs.canonical import arguments_hash, canonical_json
from runs.constants import Resolution
from tools.models import KEY_MAX_LENGTH, IdempotencyKey, KeyStatus

logger = logging.getLogger(__name__)

RETENTION_HOURS_MIN = 72
REPLAYED_HEADER = "Idempotent-Replayed"


class ToolError(ApplicationError):
    """A tool's definitive refusal (no such ticket, already closed): stored as the key's failure."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status_code: int = 422,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(code, message, status_code=status_code, details=details)


class LockLost(Exception):
    """The key's lock was taken over while this execution ran; its work must not be stored."""


@dataclass(frozen=True)
class Reservation:
    """The right to execute once: held by exactly one request per key (and attempt)."""

    pk: int
    key: str
    tool: str
    attempt: int


@dataclass(frozen=True)
class Outcome:
    """What an invoke answers: status and body, and whether they are a stored replay."""

    status_code: int
    body: dict[str, Any]
    replayed: bool
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status_code < 400

    def response_headers(self) -> dict[str, str]:
        return {**self.headers, **({REPLAYED_HEADER: "true"} if self.replayed else {})}


@dataclass(frozen=True)
class KeyCaller:
    """A token using a free-form key: it owns the keys it makes, and sees another token's only
    when it may see every agent that token was limited to (`agents` None: every agent)."""

    token_id: int
    agents: frozenset[str] | None

    def may_see(self, row: IdempotencyKey) -> bool:
        if row.owner_token_id == self.token_id or self.agents is None:
            return True
        return row.owner_agents is not None and set(row.owner_agents) <= self.agents


def key_not_found(key: str) -> ApplicationError:
    """What a token hears of a key it may not see: the same as for a key nobody made."""
    return ApplicationError(
        "not_found", "This token may not read that key.", status_code=404, details={"key": key}
    )


_active: ContextVar[Reservation | None] = ContextVar("tools_active_reservation", default=None)


def current_reservation() -> Reservation | None:
    """The reservation the running tool executes under (None outside enforcement)."""
    return _active.get()


def lock_timeout() -> timedelta:
    return timedelta(seconds=settings.TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS)


def _is_stale(row: IdempotencyKey, now: datetime) -> bool:
    return row.state == KeyStatus.IN_PROGRESS and row.locked_at <= now - lock_timeout()


def key_is_well_formed(key: str) -> bool:
    return 0 < len(key) <= KEY_MAX_LENGTH and all("!" <= ch <= "~" for ch in key)


def _outside_transactions() -> None:
    """Reservation and completion must each commit on their own, or concurrent requests for the
    key would not see the reservation: refuse to run inside a caller's transaction (a test
    case's own wrapping transaction excepted)."""
    if any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks):
        raise RuntimeError(
            "idempotency_run must not be called inside transaction.atomic(): the key's "
            "reservation has to commit before the tool runs"
        )


def idempotency_key_validate(*, key: str | None) -> str:
    """A key is 1–400 visible ASCII characters (a journal key is `{run}:{index}:{name}:{hash}`)."""
    if key is None or key == "":
        raise ApplicationError(
            "idempotency_key_required",
            "This tool has an effect: send an Idempotency-Key header (the step's idempotency_key).",
            status_code=400,
            details={"Idempotency-Key": ["Required for write tools."]},
        )
    if not key_is_well_formed(key):
        raise ApplicationError(
            "validation_error",
            "The Idempotency-Key is not valid.",
            status_code=400,
            details={
                "Idempotency-Key": [f"1 to {KEY_MAX_LENGTH} visible ASCII characters, no spaces."]
            },
        )
    return key


_RESERVE_SQL = (
    "INSERT INTO {table} (key, tool, request_hash, state, attempt, actor, locked_at, created_at,"
    " owner_token_id, owner_agents)"
    " VALUES (%s, %s, %s, %s, 1, %s, %s, %s, %s, %s)"
    " ON CONFLICT (key) DO NOTHING RETURNING id"
)


def _retry_approved(row: IdempotencyKey) -> bool:
    """A supervisor resolved the journal step holding this key as `retry` after the lock was taken."""
    from runs.models import Step

    return Step.objects.filter(
        idempotency_key=row.key,
        resolution_action=Resolution.RETRY,
        resolution_at__gt=row.locked_at,
    ).exists()


def _answer_existing(
    row: IdempotencyKey, *, tool: str, request_hash: str, now: datetime
) -> Reservation | Outcome:
    if row.tool != tool or row.request_hash != request_hash:
        raise ApplicationError(
            "idempotency_key_reused",
            "This Idempotency-Key was used with a different tool or different arguments.",
            status_code=422,
            details={"key": row.key, "tool": row.tool},
        )
    if row.state != KeyStatus.IN_PROGRESS:
        assert row.status_code is not None
        IdempotencyKey.objects.filter(pk=row.pk).update(replay_count=F("replay_count") + 1)
        return Outcome(status_code=row.status_code, body=row.response or {}, replayed=True)
    stale = _is_stale(row, now)
    if stale and _retry_approved(row):
        taken = IdempotencyKey.objects.filter(
            pk=row.pk, state=KeyStatus.IN_PROGRESS, attempt=row.attempt
        ).update(attempt=row.attempt + 1, locked_at=now)
        if taken == 1:
            return Reservation(pk=row.pk, key=row.key, tool=row.tool, attempt=row.attempt + 1)
    raise ApplicationError(
        "idempotency_in_progress",
        "A request with this Idempotency-Key is still executing; retry later for its response."
        if not stale
        else "This key's execution was lost mid-way (stale lock); a supervisor decides.",
        status_code=409,
        details={"key": row.key, "locked_at": row.locked_at.isoformat(), "stale": stale},
    )


def idempotency_reserve(
    *, key: str, tool: str, request_hash: str, actor: str = "", caller: KeyCaller | None = None
) -> Reservation | Outcome:
    """Transaction 1: claim the key, or answer from the record another request holds.

    Returns a Reservation (this request executes) or the stored Outcome (a replay); raises 409
    `idempotency_in_progress` or 422 `idempotency_key_reused`. With `caller` (a token's
    free-form key) a new key is the caller's, and another token's key it may not see is 404
    `not_found`, whatever the key's state.
    """
    owner: tuple[int | None, str | None] = (None, None)
    if caller is not None:
        agents = None if caller.agents is None else json.dumps(sorted(caller.agents))
        owner = (caller.token_id, agents)
    table = connection.ops.quote_name(IdempotencyKey._meta.db_table)
    for _ in range(3):
        now = clock.now()
        # one statement, autocommitted: its own transaction without BEGIN/COMMIT round trips
        # (ON CONFLICT DO NOTHING cannot fail half-way, so no savepoint is needed either)
        with connection.cursor() as cursor:
            cursor.execute(
                _RESERVE_SQL.format(table=table),
                [key, tool, request_hash, KeyStatus.IN_PROGRESS, actor[:200], now, now, *owner],
            )
            inserted = cursor.fetchone()
        if inserted is not None:
            return Reservation(pk=inserted[0], key=key, tool=tool, attempt=1)
        row = IdempotencyKey.objects.filter(key=key).first()
        if row is not None:
            if caller is not None and not caller.may_see(row):
                raise key_not_found(key)
            return _answer_existing(row, tool=tool, request_hash=request_hash, now=now)
        # pruned between our INSERT and SELECT: try again
    raise ApplicationError(
        "idempotency_in_progress", "The key is contended; retry.", details={"key": key}
    )


def _finish(
    reservation: Reservation, *, state: str, status_code: int, body: Any, internal_error: str = ""
) -> None:
    """Guarded update in_progress → completed|failed; the caller holds the transaction."""
    updated = IdempotencyKey.objects.filter(
        pk=reservation.pk, state=KeyStatus.IN_PROGRESS, attempt=reservation.attempt
    ).update(
        state=state,
        status_code=status_code,
        response=body,
        completed_at=clock.now(),
        internal_error=internal_error,
    )
    if updated != 1:
        raise LockLost(reservation.key)


def _failure_of(exc: Exception) -> tuple[int, dict[str, Any], str]:
    """(status, the stored failure callers see, the internal text only the log and the
    dashboard see). A tool's own exception text may hold anything (a connection string, a
    customer's data): callers get its type and a reference id, never the text."""
    if isinstance(exc, ApplicationError):  # a ToolError too
        return exc.status_code, exc.body(), ""
    reference = uuid.uuid4().hex[:12]
    name = type(exc).__name__
    return (
        502,
        error_body(
            "tool_failed",
            f"The tool raised {name} (reference {reference}; the details are in the server log).",
            {"exception": name, "reference": reference},
        ),
        f"{name}: {exc}"[:4000],
    )


def idempotency_run(
    *,
    key: str | None,
    tool: str,
    arguments: Any,
    execute: Callable[[Reservation], Any],
    actor: str = "",
    on_finish: Callable[[Outcome], None] | None = None,
    caller: KeyCaller | None = None,
) -> Outcome:
    """Run `execute` at most once per key and answer every request for that key the same way.

    `execute` runs inside transaction 2, which ends with the key's completion: its database writes
    commit with the key or not at all. Its external effect should come after its own writes (so a
    unique-constraint refusal happens before anything leaves the process). `on_finish` runs in
    the transaction that finishes the key (completed or failed), with what this call answers:
    the gateway records the journal step's outcome there.
    """
    key = idempotency_key_validate(key=key)
    _outside_transactions()
    reserved = idempotency_reserve(
        key=key, tool=tool, request_hash=arguments_hash(arguments), actor=actor, caller=caller
    )
    if isinstance(reserved, Outcome):
        return reserved
    token = _active.set(reserved)
    try:
        try:
            with transaction.atomic():
                body = {"result": execute(reserved)}
                canonical_json(body)  # a result that is not JSON is the tool's failure
                _finish(reserved, state=KeyStatus.COMPLETED, status_code=200, body=body)
                outcome = Outcome(status_code=200, body=body, replayed=False)
                if on_finish is not None:
                    on_finish(outcome)
            return outcome
        except LockLost:
            raise
        except (OperationalError, InterfaceError):
            raise  # the database is gone: the key stays in_progress, recovery decides
        except Exception as exc:
            status_code, failure, internal = _failure_of(exc)
            if internal:
                logger.exception(
                    "tool %s raised under key %s (reference %s)",
                    tool,
                    key,
                    failure["error"]["details"]["reference"],
                )
        with transaction.atomic():
            _finish(
                reserved,
                state=KeyStatus.FAILED,
                status_code=status_code,
                body=failure,
                internal_error=internal,
            )
            outcome = Outcome(status_code=status_code, body=failure, replayed=False)
            if on_finish is not None:
                on_finish(outcome)
        return outcome
    except LockLost as exc:
        raise ApplicationError(
            "idempotency_in_progress",
            "The key was taken over by a retry a supervisor approved; this execution is void.",
            details={"key": key},
        ) from exc
    finally:
        _active.reset(token)


# --- reading ----------------------------------------------------------------------------------


def idempotency_key_state(*, key: str) -> dict[str, Any]:
    """The GET /api/v1/idempotency/{key} body: state absent|in_progress|completed|failed."""
    row = IdempotencyKey.objects.filter(key=key).first()
    if row is None:
        return {"key": key, "state": "absent"}
    body: dict[str, Any] = {
        "key": row.key,
        "state": row.state,
        "tool": row.tool,
        "request_hash": row.request_hash,
        "stale": _is_stale(row, clock.now()),
        "locked_at": row.locked_at.isoformat(),
        "created_at": row.created_at.isoformat(),
        "completed_at": row.completed_at.isoformat() if row.completed_at else None,
    }
    if row.state != KeyStatus.IN_PROGRESS:
        body["status_code"] = row.status_code
        body["response"] = row.response
    return body


# --- retention --------------------------------------------------------------------------------


def idempotency_keys_prune(*, batch_size: int = 5000) -> int:
    """Delete completed and failed keys finished longer ago than the retention (≥ 72 h).

    In-progress keys are never pruned: they are the evidence that something may have happened.
    """
    hours = max(RETENTION_HOURS_MIN, settings.TOOLS_IDEMPOTENCY_RETENTION_HOURS)
    cutoff = clock.now() - timedelta(hours=hours)
    total = 0
    while True:
        ids = list(
            IdempotencyKey.objects.filter(
                state__in=[KeyStatus.COMPLETED, KeyStatus.FAILED], completed_at__lt=cutoff
            )
            .order_by("completed_at")
            .values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return total
        deleted, _ = (
            IdempotencyKey.objects.filter(pk__in=ids).exclude(state=KeyStatus.IN_PROGRESS).delete()
        )
        total += deleted


# --- for people hosting their own tool service ----------------------------------------------


def idempotent(*, tool: str) -> Callable[[Callable[..., Any]], Callable[..., Outcome]]:
    """Decorate a side-effecting function so it runs at most once per idempotency key.

    The decorated function is called as `fn(idempotency_key=..., **arguments)` and returns an
    Outcome (status_code, body, replayed); refusals raise ApplicationError (400/409/422). If the
    function itself takes an `idempotency_key` parameter it receives the key (e.g. to derive a
    Message-ID or to stamp its rows).
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Outcome]:
        wants_key = "idempotency_key" in inspect.signature(fn).parameters

        @functools.wraps(fn)
        def call(*, idempotency_key: str | None, **arguments: Any) -> Outcome:
            def execute(reservation: Reservation) -> Any:
                if wants_key:
                    return fn(idempotency_key=reservation.key, **arguments)
                return fn(**arguments)

            return idempotency_run(
                key=idempotency_key, tool=tool, arguments=arguments, execute=execute
            )

        return call

    return decorate


__all__ = [
    "REPLAYED_HEADER",
    "KeyCaller",
    "Outcome",
    "Reservation",
    "ToolError",
    "current_reservation",
    "idempotency_key_state",
    "idempotency_keys_prune",
    "idempotency_reserve",
    "idempotency_run",
    "idempotent",
    "key_not_found",
]
