"""The lean path for the worker calls: intent, outcome, heartbeat, lease, and a run's create,
complete and fail.

A well-formed request from a known token is answered here, validated from the same declaration
as the DRF serializers (runs.contract) and run by the same functions as the DRF views
(runs.hotcalls), minus the request/serializer machinery that cost more CPU than the database
work. Anything else (bad input, an unknown token, a body over the limit, a content type that is
not JSON) is declined and answered by the DRF view, so every refusal of the contract keeps
exactly one implementation (tests/runs/test_doors_agree.py holds the two doors together).

Two doors lead here: `hot_view` wraps the DRF view in Django's URL conf (so the contract tests
and runserver use it), and `HotPathWSGI` answers before Django builds a request at all (the web
server, config.serve).
"""

import io
import json
import re
import select
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
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
from django.urls.converters import UUIDConverter
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import APIException

from runs import contract, hotcalls
from runs.api_errors import ApplicationError, StrictJSONParser
from runs.authentication import (
    TokenRevoked,
    principal_for,
    principal_known,
    scope_of,
    token_live,
)
from runs.contract import Decline
from runs.observe import step_call
from teams.scope import using

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


@dataclass(frozen=True)
class HotAnswer:
    status: int
    body: bytes


def _refusal(error: ApplicationError) -> HotAnswer:
    return HotAnswer(error.status_code, _dumps(error.body()))


def answer(
    call: str,
    *,
    run_id: UUID | None,
    index: int | None,
    body: bytes,
    authorization: str | None,
    traceparent: str | None = None,
) -> HotAnswer:
    """Answer one lean call (`run_id` None: create), or raise Decline for the DRF view to.

    The token is checked live on every call, in the round trip and transaction of the call's
    first statement (`token_live`); a gateway step, which runs a tool, reads it first.
    """
    if not authorization or not authorization.startswith("Bearer "):
        raise Decline
    try:
        data = parse_strict_json(body)
    except ValueError as exc:
        raise Decline from exc
    raw = authorization[7:].strip()
    guarded = not (call == "intent" and isinstance(data, dict) and data.get("invoke"))
    principal = principal_known(raw) if guarded else principal_for(raw)
    if principal is None:
        raise Decline
    step = data.get("index") if call == "intent" and isinstance(data, dict) else index
    with step_call(call, run_id=run_id, index=step if isinstance(step, int) else None) as seen:
        try:
            with using(scope_of(principal)), token_live(principal) if guarded else nullcontext():
                code, reply = hotcalls.answer(
                    call,
                    principal=principal,
                    run_id=run_id,
                    index=index,
                    data=data,
                    validate=contract.Shape.lean,  # Decline: the DRF view answers
                    traceparent=traceparent,
                )
            if run_id is None:
                seen.name_run(reply["id"])  # the run it created or attached to
            return HotAnswer(code, _dumps(reply))
        except ApplicationError as error:
            seen.code = error.code
            return _refusal(error)
        except Decline:
            seen.code = "declined"  # the DRF view answers (with its validation errors)
            raise
        except TokenRevoked as revoked:
            seen.code = "declined"  # the DRF view answers 401
            raise Decline from revoked


def socket_health_check() -> None:
    """The WSGI door's database health check: Django's, without its round trip.

    Django checks a kept connection before the first query of each request (CONN_HEALTH_CHECKS:
    a `SELECT 1`, one more round trip to PostgreSQL per call). Here the connection's socket is
    polled instead, without waiting: an idle connection has nothing to read, so anything
    readable (the notice a terminated backend or a restart leaves, or EOF) means it is dead. It
    is closed, and the call's statement opens a fresh one instead of failing with 503. A
    connection found alive is marked checked for this request (`health_check_done`, the flag
    Django's own check sets when it has run), so Django does not send its SELECT 1 as well.

    What the round trip costs: bench/SERVERS.md ("Django's health check"). Tests:
    tests/runs/test_hot_path.py (a terminated backend, and no SELECT 1 before the statement).
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

    def view(request: HttpRequest, **kwargs: Any) -> Any:
        if (
            request.method == "POST"
            and request.content_type == "application/json"
            and 0 < _content_length(request.META) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        ):
            try:
                hot = answer(
                    call,
                    run_id=kwargs.get("run_id"),
                    index=kwargs.get("index"),
                    body=request.body,
                    authorization=request.headers.get("Authorization"),
                    traceparent=request.headers.get("traceparent"),
                )
            except Decline:
                pass
            else:
                return HttpResponse(hot.body, status=hot.status, content_type="application/json")
        return drf_view(request, **kwargs)

    # drf-spectacular documents the DRF view behind this URL
    view.cls = drf_view.cls  # type: ignore[attr-defined]
    view.initkwargs = drf_view.initkwargs  # type: ignore[attr-defined]
    return csrf_exempt(view)


# --- door 2: in front of Django (config.serve, runserver) -----------------------------------

# Django's own <uuid:> pattern: a path the URLconf would 404 is Django's to answer here too
_UUID = rf"(?P<run_id>{UUIDConverter.regex})"
_ROUTES = [
    (re.compile(rf"^/api/v1/runs/{_UUID}/steps/$"), "intent"),
    (re.compile(r"^/api/v1/runs/$"), "create"),
    (re.compile(rf"^/api/v1/runs/{_UUID}/complete$"), "complete"),
    (re.compile(rf"^/api/v1/runs/{_UUID}/fail$"), "fail"),
    (re.compile(rf"^/api/v1/runs/{_UUID}/steps/(?P<index>[0-9]{{1,9}})/outcome$"), "outcome"),
    (re.compile(rf"^/api/v1/runs/{_UUID}/heartbeat$"), "heartbeat"),
    (re.compile(rf"^/api/v1/runs/{_UUID}/lease$"), "lease"),
]
_REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    400: "Bad Request",
    403: "Forbidden",
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
        # connection past DATABASE_CONN_MAX_AGE (at 0, every one), or each server thread whose
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
        run_id = match.groupdict().get("run_id")
        call = {
            "run_id": None if run_id is None else UUID(run_id),
            "index": None if index is None else int(index),
            "body": body,
            "authorization": environ.get("HTTP_AUTHORIZATION"),
            "traceparent": environ.get("HTTP_TRACEPARENT"),
        }
        # a connection that died between requests fails the first statement: intents, outcomes,
        # heartbeats, completes and fails go again once on a fresh one (a repeat is answered as
        # recorded); a lease does not (a repeat would count a recovery), nor a create (one
        # without external_id would make a second run): the client retries its 503
        attempts = 1 if route in ("lease", "create") else 2
        for attempt in range(attempts):
            try:
                socket_health_check()
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
