"""The lean path for the four hot worker calls: intent, outcome, heartbeat and lease.

A well-formed request from a known token is answered here, with the same services (the journal
kernel), the same representations and the same error envelope as the DRF views, minus the
request/serializer machinery that cost more CPU than the database work. Anything else (bad
input, an unknown token, a body over the limit, a content type that is not JSON) is declined
and answered by the DRF view, so every refusal of the contract keeps exactly one implementation.

Two doors lead here: `hot_view` wraps the DRF view in Django's URL conf (so the contract tests
and runserver use it), and `HotPathWSGI` answers before Django builds a request at all (gunicorn).
"""

import io
import json
import re
import select
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

import orjson
import psycopg
from django.conf import settings
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    connections,
)
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import APIException

from runs import services
from runs.access import run_check_visible
from runs.api_errors import ApplicationError, StrictJSONParser, error_body
from runs.apis import MAX_EPOCH, MAX_STEP_INDEX, MAX_TOKENS_PER_CALL, intent_status
from runs.authentication import principal_for
from runs.constants import Effect, EnforcedBy, StepKind
from runs.observe import step_call
from runs.representations import heartbeat_json, lease_json, step_json
from tools.gateway import gateway_step_run

_KINDS = frozenset(StepKind.values)
_EFFECTS = frozenset(Effect.values)
_ENFORCERS = frozenset(EnforcedBy.values)
_OUTCOME_STATUSES = frozenset({"ok", "error"})

# the security headers Django's middleware gives every response (tests/reliability/test_security)
HEADERS = [
    ("Content-Type", "application/json"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
]


def _dumps(value: Any) -> bytes:
    """orjson, about 5x json's speed; json for what orjson refuses (integers over 64 bits)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def parse_strict_json(raw: bytes) -> Any:
    """The API's own parser (size, UTF-8, NaN, NUL, depth, duplicate keys): one set of rules."""
    try:
        return StrictJSONParser().parse(io.BytesIO(raw))
    except APIException as exc:
        raise ValueError(str(exc.detail)) from exc


class Decline(Exception):
    """Not for the lean path: the DRF view answers (with its exact validation errors)."""


@dataclass(frozen=True)
class HotAnswer:
    status: int
    body: bytes


# --- validation: accept what the DRF serializers accept, decline the rest -------------------


def _int(data: dict[str, Any], name: str, low: int, high: int, default: int | None = None) -> int:
    value = data.get(name, default)
    if type(value) is not int or not low <= value <= high:
        raise Decline
    return value


def _text(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if type(value) is not str or not 0 < len(value) <= 200 or value != value.strip():
        raise Decline
    return value


def _choice(value: Any, choices: frozenset[str]) -> bool:
    return type(value) is str and value in choices


def _only(data: Any, allowed: frozenset[str]) -> dict[str, Any]:
    if type(data) is not dict or not data.keys() <= allowed:
        raise Decline
    return data


_USAGE_FIELDS = frozenset({"input_tokens", "output_tokens", "cost_usd"})


def _usage(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    usage = _only(value, _USAGE_FIELDS)
    cost = usage.get("cost_usd")
    if cost is not None:
        if type(cost) not in (str, int):
            raise Decline
        try:
            amount = Decimal(cost)
        except InvalidOperation as exc:
            raise Decline from exc
        exponent = amount.as_tuple().exponent
        # DRF's DecimalField(max_digits=12, decimal_places=6, min_value=0), or the view answers
        if not amount.is_finite() or not 0 <= amount < 10**6 or int(exponent) < -6:
            raise Decline
        cost = amount
    return {
        "input_tokens": _int(usage, "input_tokens", 0, MAX_TOKENS_PER_CALL, 0),
        "output_tokens": _int(usage, "output_tokens", 0, MAX_TOKENS_PER_CALL, 0),
        "cost_usd": cost,
    }


_OUTCOME_FIELDS = frozenset({"status", "result", "usage"})


def _outcome(data: dict[str, Any]) -> dict[str, Any]:
    status = data.get("status", "ok")
    if not _choice(status, _OUTCOME_STATUSES):
        raise Decline
    return {"status": status, "result": data.get("result"), "usage": _usage(data.get("usage"))}


_INTENT_FIELDS = frozenset(
    {"epoch", "index", "kind", "name", "effect", "enforced_by", "arguments", "outcome", "invoke"}
)


def intent_fields(data: Any) -> dict[str, Any]:
    """The intent call's arguments from its JSON body, as its DRF serializer validates them
    (`invoke` included); Decline for anything else. Also the in-process transport's check."""
    data = _only(data, _INTENT_FIELDS)
    kind, effect, enforced_by = data.get("kind"), data.get("effect"), data.get("enforced_by")
    arguments, outcome = data.get("arguments"), data.get("outcome")
    invoke = data.get("invoke", False)
    if (
        not _choice(kind, _KINDS)
        or not _choice(effect, _EFFECTS)
        or not (enforced_by is None or _choice(enforced_by, _ENFORCERS))
        or (effect == Effect.READ and enforced_by)
        or type(arguments) is not dict
        or (outcome is not None and effect == Effect.WRITE)
        or type(invoke) is not bool
        or (invoke and (outcome is not None or kind != StepKind.TOOL))
    ):
        raise Decline
    return {
        "epoch": _int(data, "epoch", 0, MAX_EPOCH),
        "index": _int(data, "index", 0, MAX_STEP_INDEX),
        "kind": kind,
        "name": _text(data, "name"),
        "effect": effect,
        "enforced_by": enforced_by,
        "arguments": arguments,
        "outcome": None if outcome is None else _outcome(_only(outcome, _OUTCOME_FIELDS)),
        "invoke": invoke,
    }


def _intent_call(run_id: UUID, data: Any, actor: str) -> HotAnswer:
    fields = intent_fields(data)
    if fields.pop("invoke"):  # a gateway step in one call (tools.gateway): as the DRF view
        del fields["kind"], fields["outcome"]
        gateway = gateway_step_run(run_id=run_id, **fields, actor=actor)
        body = step_json(gateway.step)
        if gateway.budget_refusal is not None:
            return _refusal(gateway.budget_refusal, {"step": body})
        # 202 while an approval rule holds it, as the three-call form answers
        return HotAnswer(intent_status(gateway.step.state, created=gateway.created), _dumps(body))
    result = services.step_intent_record(run_id=run_id, **fields, actor=actor)
    body = step_json(result.step)
    if result.budget_refusal is not None:
        return _refusal(result.budget_refusal, {"step": body})
    return HotAnswer(intent_status(result.step.state, created=result.created), _dumps(body))


_OUTCOME_CALL_FIELDS = frozenset({"epoch", "status", "result", "usage"})


def outcome_fields(data: Any) -> dict[str, Any]:
    """The outcome call's arguments (epoch, status, result, usage), or Decline."""
    data = _only(data, _OUTCOME_CALL_FIELDS)
    return {"epoch": _int(data, "epoch", 0, MAX_EPOCH), **_outcome(data)}


def _outcome_call(run_id: UUID, index: int, data: Any, actor: str) -> HotAnswer:
    result = services.step_outcome_record(
        run_id=run_id, index=index, **outcome_fields(data), actor=actor
    )
    body = {"step": step_json(result.step), "budget": services.budget_of(result.run)}
    if result.budget_refusal is not None:
        return _refusal(result.budget_refusal, body)
    return HotAnswer(200, _dumps(body))


def heartbeat_fields(data: Any) -> dict[str, Any]:
    """The heartbeat call's arguments (epoch), or Decline."""
    return {"epoch": _int(_only(data, frozenset({"epoch"})), "epoch", 0, MAX_EPOCH)}


def _heartbeat_call(run_id: UUID, data: Any) -> HotAnswer:
    beat = services.run_heartbeat(run_id=run_id, **heartbeat_fields(data))
    return HotAnswer(200, _dumps(heartbeat_json(beat)))


def lease_fields(data: Any) -> dict[str, Any]:
    """The lease call's arguments (worker, ttl_seconds), or Decline."""
    data = _only(data, frozenset({"worker", "ttl_seconds"}))
    return {"worker": _text(data, "worker"), "ttl_seconds": _int(data, "ttl_seconds", 5, 600, 30)}


def _lease_call(run_id: UUID, data: Any, actor: str) -> HotAnswer:
    grant = services.run_lease_acquire(run_id=run_id, **lease_fields(data), actor=actor)
    return HotAnswer(200, _dumps(lease_json(grant)))


def _refusal(error: ApplicationError, extra: dict[str, Any] | None = None) -> HotAnswer:
    details = {**error.details, **(extra or {})}
    return HotAnswer(error.status_code, _dumps(error_body(error.code, error.message, details)))


def answer(
    call: str, *, run_id: UUID, index: int | None, body: bytes, authorization: str | None
) -> HotAnswer:
    """Answer one hot call, or raise Decline for the DRF view to answer it."""
    if not authorization or not authorization.startswith("Bearer "):
        raise Decline
    principal = principal_for(authorization[7:].strip())
    if principal is None:
        raise Decline
    try:
        data = parse_strict_json(body)
    except ValueError as exc:
        raise Decline from exc
    actor = str(principal)
    step = data.get("index") if call == "intent" and isinstance(data, dict) else index
    with step_call(call, run_id=run_id, index=step if isinstance(step, int) else None) as seen:
        try:
            run_check_visible(principal=principal, run_id=run_id)
            if call == "intent":
                return _intent_call(run_id, data, actor)
            if call == "outcome":
                assert index is not None
                return _outcome_call(run_id, index, data, actor)
            if call == "heartbeat":
                return _heartbeat_call(run_id, data)
            return _lease_call(run_id, data, actor)
        except ApplicationError as error:
            seen.code = error.code
            return _refusal(error)
        except Decline:
            seen.code = "declined"  # the DRF view answers (with its validation errors)
            raise


def drop_dead_connection() -> None:
    """Django's per-request health check, without its round trip.

    An idle connection has nothing to read; if the server sent something anyway (the notice a
    terminated backend or a restart leaves, or EOF), the connection is dead: close it, and the
    next query opens a fresh one instead of failing with 503.
    """
    conn = connection.connection
    if conn is None:
        return
    if not connection.in_atomic_block:  # (a test's transaction: nothing to close)
        try:
            readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            readable = [True]
        if readable:
            connection.close()
            return
    # this was the health check: Django need not send its SELECT 1 before our call
    connection.health_check_done = True  # type: ignore[attr-defined]


def _database_unavailable() -> HotAnswer:
    for conn in connections.all(initialized_only=True):
        conn.close_if_unusable_or_obsolete()
    return _refusal(
        ApplicationError(
            "database_unavailable",
            "The database is not reachable right now; retry with backoff.",
            status_code=503,
        )
    )


def _content_length(meta: dict[str, Any]) -> int:
    try:
        return int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


# --- door 1: Django's URL conf --------------------------------------------------------------


def hot_view(call: str, drf_view: Callable[..., Any]) -> Callable[..., Any]:
    """The DRF view's URL, answered by the lean path when it can."""

    def view(request: HttpRequest, run_id: UUID, index: int | None = None) -> Any:
        if (
            request.method == "POST"
            and request.content_type == "application/json"
            and 0 < _content_length(request.META) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        ):
            try:
                hot = answer(
                    call,
                    run_id=run_id,
                    index=index,
                    body=request.body,
                    authorization=request.headers.get("Authorization"),
                )
            except Decline:
                pass
            else:
                return HttpResponse(hot.body, status=hot.status, content_type="application/json")
        if index is None:
            return drf_view(request, run_id=run_id)
        return drf_view(request, run_id=run_id, index=index)

    # drf-spectacular documents the DRF view behind this URL
    view.cls = drf_view.cls  # type: ignore[attr-defined]
    view.initkwargs = drf_view.initkwargs  # type: ignore[attr-defined]
    return csrf_exempt(view)


# --- door 2: in front of Django (gunicorn, runserver) ---------------------------------------

_UUID = (
    r"(?P<run_id>[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12})"
)
_ROUTES = [
    (re.compile(rf"^/api/v1/runs/{_UUID}/steps/$"), "intent"),
    (re.compile(rf"^/api/v1/runs/{_UUID}/steps/(?P<index>[0-9]{{1,9}})/outcome$"), "outcome"),
    (re.compile(rf"^/api/v1/runs/{_UUID}/heartbeat$"), "heartbeat"),
    (re.compile(rf"^/api/v1/runs/{_UUID}/lease$"), "lease"),
]
_REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    400: "Bad Request",
    404: "Not Found",
    409: "Conflict",
    422: "Unprocessable Entity",
    502: "Bad Gateway",
    503: "Unavailable",
}


class HotPathWSGI:
    """Answers the hot calls before Django builds a request; hands everything else to Django."""

    def __init__(self, django_app: Callable[..., Iterable[bytes]]) -> None:
        self.django_app = django_app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        hot = self._answer(environ) if environ.get("REQUEST_METHOD") == "POST" else None
        if hot is None:
            return self.django_app(environ, start_response)
        # what Django's request_finished would do, which a hot answer never sends: close a
        # connection past DATABASE_CONN_MAX_AGE (at 0, every one), or each gunicorn thread whose
        # last request was a hot call kept its connection open, idle, for good
        close_old_connections()
        status = f"{hot.status} {_REASONS.get(hot.status, 'Error')}"
        headers = [*HEADERS, ("Content-Length", str(len(hot.body)))]
        if hot.status == 503:
            headers.append(("Retry-After", "1"))  # as runs.middleware says for the rest
        start_response(status, headers)
        return [hot.body]

    def _answer(self, environ: dict[str, Any]) -> HotAnswer | None:
        if settings.SECURE_SSL_REDIRECT or environ.get("SCRIPT_NAME"):
            return None
        path = environ.get("PATH_INFO", "")
        for pattern, route in _ROUTES:  # noqa: B007 (the match names the route)
            match = pattern.match(path)
            if match is not None:
                break
        else:
            return None
        if environ.get("CONTENT_TYPE", "").split(";")[0].strip() != "application/json":
            return None
        length = _content_length(environ)
        if not 0 < length <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return None
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = _Replay(body)  # Django reads it again if we decline
        index = match.groupdict().get("index")
        call = {
            "run_id": UUID(match["run_id"]),
            "index": None if index is None else int(index),
            "body": body,
            "authorization": environ.get("HTTP_AUTHORIZATION"),
        }
        # a connection that died between requests fails the first statement: intents, outcomes
        # and heartbeats go again once on a fresh one (a repeat is answered as recorded); a lease
        # does not (a repeat would count a recovery), the client retries its 503
        attempts = 1 if route == "lease" else 2
        for attempt in range(attempts):
            try:
                drop_dead_connection()
                return answer(route, **call)
            except Decline:
                return None
            except (OperationalError, InterfaceError):
                if attempt + 1 == attempts or connection.is_usable():
                    return _database_unavailable()
                connection.close()
        return None


class _Replay:
    """The body already read, as a wsgi.input Django can read again."""

    def __init__(self, body: bytes) -> None:
        self._stream = io.BytesIO(body)

    def read(self, size: int = -1) -> bytes:
        return self._stream.read(size)

    def readline(self, size: int = -1) -> bytes:
        return self._stream.readline(size)
