"""The SDK's in-process transport: a worker beside the database journals without the HTTP hop.

`Ledger(transport=InProcessTransport(token))` calls the services the worker API calls (the
journal kernel, the gateway), in this process, through Django's database connection; the
Celery-run agents use it (celery_agents.tasks). It keeps the API's rules by calling the API's own
pieces, not copies of them:

- who: the worker token is checked live on every call as the API checks it (a lean call, the
  API's runs.hotcalls, in its first statement's own round trip and transaction, `token_live`;
  any other call by a statement first, `principal_for`), so a revocation counts on the very next
  call; a token limited to agents sees other agents' runs as 404 `not_found` (`runs.access`),
  as over HTTP;
- what: each body goes through the API's JSON parser (size limit, NaN, NUL, depth, numbers in
  their storage form) and the lean path's field checks, or the DRF serializer's for the exact
  400 when those decline;
- answers and refusals: the same representations, and the same error envelope turned into the
  SDK's typed exceptions (`intentledger.errors.error_from_response`), status included;
- an unreachable database is retried with backoff like a 503, then `LedgerUnavailable`.

A call journals and commits before it returns, so it refuses to run inside a caller's
transaction (an intent that is not committed is not journalled). Calls from a thread other
than the one that built the transport (the SDK's heartbeat thread) close that thread's
connection afterwards, so a run leaves no idle connection behind.
"""

from __future__ import annotations

import io
import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

from asgiref.sync import async_to_sync
from django.db import InterfaceError, OperationalError, connection
from django.http import QueryDict
from intentledger import Ledger, LedgerError, LedgerUnavailable, StepIntent, StepOutcome, ToolCall
from intentledger.errors import error_from_response
from rest_framework import exceptions, serializers

from runs import apis, contract, hotcalls, selectors
from runs.access import not_found, run_check_visible
from runs.api_errors import StrictJSONParser, exception_handler
from runs.authentication import (
    TokenRevoked,
    WorkerPrincipal,
    principal_for,
    principal_known,
    scope_of,
    token_live,
)
from runs.models import Run
from runs.representations import event_json, run_json, step_json
from runs.services.approvals import step_wait_decided
from runs.waiting import SETTLED, run_wait
from teams.scope import using
from tools.apis import McpToolsReportApi, ToolInvokeApi
from tools.mcp_tools import mcp_tools_report
from tools.registry import tool_invoke, tools_list

T = TypeVar("T")
MAX_WAIT_SECONDS = apis.MAX_WAIT_SECONDS


class InProcessTransport:
    """An `intentledger.Transport` for a worker identity (its raw worker token)."""

    def __init__(
        self, token: str, *, retries: int = 5, backoff: float = 0.1, max_backoff: float = 2.0
    ) -> None:
        self._token = token
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._owner = threading.get_ident()

    def close(self) -> None:
        """Nothing to release: the connection is Django's, closed as Django closes it."""

    # --- runs -----------------------------------------------------------------------------

    def create_run(
        self, *, agent: str, input: Any, external_id: str | None, traceparent: str | None = None
    ) -> dict[str, Any]:
        body = {"agent": agent, "input": input, "external_id": external_id}
        # without an external id a repeat after a lost commit would make a second run
        return self._hot(
            "create", None, body, idempotent=external_id is not None, traceparent=traceparent
        )

    def get_run(self, run_id: str, *, wait: int | None = None) -> dict[str, Any]:
        def get(principal: WorkerPrincipal) -> dict[str, Any]:
            run_check_visible(principal=principal, run_id=run_id)
            if wait is not None and not 0 <= wait <= MAX_WAIT_SECONDS:
                raise serializers.ValidationError(
                    {"wait": [f"An integer from 0 to {MAX_WAIT_SECONDS}."]}
                )
            run = Run.objects.filter(pk=run_id).first()
            if run is None:
                raise not_found(run_id)
            if wait and run.status not in SETTLED:
                waited = async_to_sync(run_wait)(run_id=str(run_id), seconds=wait, shared=False)
                run = waited or run
            return run_json(run)

        return self._call(get)

    def find_runs(
        self, *, agent: str, external_id: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        query: dict[str, Any] = {"agent": agent, "external_id": external_id}
        if limit is not None:
            query["limit"] = limit

        def find(principal: WorkerPrincipal) -> list[dict[str, Any]]:
            # a query string, as the API reads one (an empty parameter is no filter)
            params = QueryDict(urlencode(query))
            data = _validated(apis.RunListApi.ListQuerySerializer, params)
            page = selectors.runs_find(principal=principal, **data)
            return [run_json(run) for run in page.runs]

        return self._call(find)

    def journal(self, run_id: str) -> dict[str, Any]:
        def journal(principal: WorkerPrincipal) -> dict[str, Any]:
            run_check_visible(principal=principal, run_id=run_id)
            steps, events = selectors.run_journal(run_id=run_id)
            return {
                "steps": [step_json(s) for s in steps],
                "events": [event_json(e) for e in events],
            }

        return self._call(journal)

    def lease(self, run_id: str, *, worker: str, ttl_seconds: int) -> dict[str, Any]:
        return self._hot("lease", run_id, {"worker": worker, "ttl_seconds": ttl_seconds})

    def heartbeat(self, run_id: str, *, epoch: int) -> dict[str, Any]:
        return self._hot("heartbeat", run_id, {"epoch": epoch})

    def run_complete(self, run_id: str, *, epoch: int, output: Any) -> dict[str, Any]:
        return self._hot("complete", run_id, {"epoch": epoch, "output": output})

    def run_fail(self, run_id: str, *, epoch: int, error: Any) -> dict[str, Any]:
        return self._hot("fail", run_id, {"epoch": epoch, "error": error})

    def _hot(
        self,
        name: str,
        run_id: str | None,
        body: dict[str, Any],
        *,
        index: int | None = None,
        idempotent: bool = True,
        one_statement: bool = True,
        traceparent: str | None = None,
    ) -> dict[str, Any]:
        """Hot call `name` (runs.hotcalls), validated as the HTTP doors validate it."""

        def call(principal: WorkerPrincipal) -> dict[str, Any]:
            code_and_body = hotcalls.answer(
                name,
                principal=principal,
                run_id=run_id,
                index=index,
                data=body,
                validate=_fields,
                traceparent=traceparent,
            )
            return code_and_body[1]

        return self._call(call, idempotent=idempotent, one_statement=one_statement)

    # --- steps ----------------------------------------------------------------------------

    def step_record(self, run_id: str, intent: StepIntent) -> dict[str, Any]:
        return self._hot("intent", run_id, intent.body(), one_statement=not intent.invoke)

    def step_outcome(self, run_id: str, outcome: StepOutcome, *, epoch: int) -> dict[str, Any]:
        body = outcome.body(epoch=epoch)
        return self._hot("outcome", run_id, body, index=outcome.index)

    def step_wait(self, run_id: str, index: int, *, wait: int) -> dict[str, Any]:
        def get(principal: WorkerPrincipal) -> dict[str, Any]:
            run_check_visible(principal=principal, run_id=run_id)
            if not 0 <= wait <= MAX_WAIT_SECONDS:
                raise serializers.ValidationError({"wait": [f"0..{MAX_WAIT_SECONDS}"]})
            step = step_wait_decided(run_id=run_id, index=index, wait_seconds=wait)
            return step_json(step)

        return self._call(get)

    # --- the tool gateway -----------------------------------------------------------------

    def tool_invoke(self, call: ToolCall) -> Any:
        body = {"arguments": call.arguments}

        def invoke(principal: WorkerPrincipal) -> Any:
            data = _validated(ToolInvokeApi.InputSerializer, _parsed(body))
            outcome = tool_invoke(
                name=call.name,
                arguments=data["arguments"],
                idempotency_key=call.idempotency_key,
                actor=str(principal),
                principal=principal,
                ledger_epoch=call.epoch if call.idempotency_key else None,
            )
            if not outcome.ok:  # the tool's refusal or stored failure, as the gateway answers
                raise error_from_response(outcome.status_code, outcome.body)
            return outcome.body.get("result")

        return self._call(invoke)

    def tools_list(self) -> list[dict[str, Any]]:
        return self._call(lambda _principal: [t.describe() for t in tools_list()])

    def mcp_tools_report(self, *, server: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        body = {"server": server, "tools": tools}

        def report(_principal: WorkerPrincipal) -> list[dict[str, Any]]:
            data = _validated(McpToolsReportApi.InputSerializer, _parsed(body))
            rows = mcp_tools_report(**data)
            return list(McpToolsReportApi.OutputSerializer({"tools": rows}).data["tools"])

        return self._call(report)

    # --- one call ---------------------------------------------------------------------------

    def _call(
        self,
        call: Callable[[WorkerPrincipal], T],
        *,
        idempotent: bool = True,
        one_statement: bool = False,
    ) -> T:
        """`call` as the worker, its refusals as the SDK's exceptions; a lost database is
        retried (when `idempotent`) with the HTTP client's backoff, then LedgerUnavailable.
        A `one_statement` (hot) call checks the token in its first statement's round trip."""
        if connection.in_atomic_block:
            raise RuntimeError(
                "The in-process transport journals and commits each call: do not call it "
                "inside a transaction (transaction.atomic)."
            )
        attempt = 0
        try:
            while True:
                try:
                    return self._as_worker(call, one_statement=one_statement)
                except (OperationalError, InterfaceError) as exc:
                    connection.close_if_unusable_or_obsolete()
                    if not idempotent or attempt >= self.retries:
                        raise LedgerUnavailable(
                            f"The ledger's database is unreachable after {attempt + 1} "
                            f"attempt(s) ({type(exc).__name__}: {exc}).",
                            code="database_unavailable",
                            status=503,
                        ) from exc
                    self._sleep(attempt)
                    attempt += 1
                except LedgerError:
                    raise
                except Exception as exc:
                    error = _as_ledger_error(exc)
                    if error is None:
                        raise
                    raise error from exc
        finally:
            if threading.get_ident() != self._owner:
                connection.close()  # the heartbeat thread's: no idle connection left behind

    def _as_worker(self, call: Callable[[WorkerPrincipal], T], *, one_statement: bool) -> T:
        if not one_statement:
            principal = self._principal(principal_for)
            with using(scope_of(principal)):  # the token's team, as over HTTP
                return call(principal)
        principal = self._principal(principal_known)
        try:
            with using(scope_of(principal)), token_live(principal):
                return call(principal)
        except TokenRevoked:
            raise _unauthenticated() from None

    def _principal(self, read: Callable[[str], WorkerPrincipal | None]) -> WorkerPrincipal:
        principal = read(self._token)
        if principal is None:
            raise _unauthenticated()
        return principal

    def _sleep(self, attempt: int) -> None:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        time.sleep(delay * (0.5 + random.random() / 2))


def _unauthenticated() -> exceptions.AuthenticationFailed:
    return exceptions.AuthenticationFailed("Unknown or revoked worker token.")


def _parsed(body: dict[str, Any]) -> Any:
    """`body` as the API reads it: its JSON parser's checks and its numbers' storage form."""
    raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return StrictJSONParser().parse(io.BytesIO(raw))


def _validated(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _fields(shape: contract.Shape, body: dict[str, Any]) -> dict[str, Any]:
    """A hot call's arguments by runs.contract's lean checks; its DRF serializer's (and its
    exact 400) for whatever those decline, as the API does."""
    data = _parsed({k: v for k, v in body.items() if v is not None or k == "result"})
    try:
        return shape.lean(data)
    except contract.Decline:
        return shape.validated(data)


def _as_ledger_error(exc: Exception) -> LedgerError | None:
    """The API's exception handler's answer to `exc`, as the SDK turns that answer into one
    (None: the API would not answer it either, a bug to raise as it is)."""
    response = exception_handler(exc, {})
    if response is None:
        return None
    return error_from_response(response.status_code, response.data)


def in_process_ledger(token: str, **options: Any) -> Ledger:
    """An `intentledger.Ledger` journalling in-process as the worker with `token`."""
    return Ledger(transport=InProcessTransport(token, **options))


__all__ = ["InProcessTransport", "in_process_ledger"]
