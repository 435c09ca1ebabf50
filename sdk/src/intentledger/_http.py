"""HTTP to the ledger (the default transport, the public contract): JSON in and out, typed
errors, retries with backoff for idempotent calls.

httpx is imported when the first client is built, not when `intentledger` is imported, so an
agent process that only imports the SDK pays nothing for it.
"""

from __future__ import annotations

import contextlib
import importlib
import random
import sys
import time
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from intentledger._transport import StepIntent, StepOutcome, ToolCall
from intentledger.errors import LedgerError, LedgerUnavailable, error_from_response

if TYPE_CHECKING:
    import httpx

RETRY_STATUSES = frozenset({500, 502, 503, 504})
# 502 from the gateway is the tool's own stored failure (`tool_failed`), not an outage
GATEWAY_RETRY_STATUSES = frozenset({500, 503, 504})


def tls_verification(url: str) -> Any:
    """What an httpx client for `url` verifies TLS with (its `verify`).

    Over https, httpx's default: the CA bundle. Over plain http no TLS is spoken, yet httpx
    loads the bundle for every client it builds, about 40 ms of CPU, a tenth of an agent
    process's start; a context that trusts nobody stands in, so a redirect to https would fail
    its check rather than pass unchecked.
    """
    if not url.lower().startswith("http://"):
        return True
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates, knows no CA


def import_httpx() -> Any:
    """httpx, without its command-line tool: its __init__ imports `httpx._main` (click, rich,
    pygments; ~80 ms, a quarter of a worker's restart). A placeholder stands in for it during the
    import and loads the real CLI if anyone ever calls `httpx.main`.
    """
    if "httpx" in sys.modules:
        return sys.modules["httpx"]
    placeholder = types.ModuleType("httpx._main")

    def main(*args: Any, **kwargs: Any) -> Any:
        sys.modules.pop("httpx._main", None)
        real = importlib.import_module("httpx._main")
        return real.main(*args, **kwargs)

    placeholder.main = main  # type: ignore[attr-defined]
    sys.modules.setdefault("httpx._main", placeholder)
    try:
        import httpx
    finally:
        if sys.modules.get("httpx._main") is placeholder:
            del sys.modules["httpx._main"]
    return httpx


@dataclass(frozen=True)
class Response:
    status: int
    body: Any
    headers: dict[str, str]


class HttpTransport:
    """One connection pool per Ledger; safe to share with the heartbeat thread.

    The named methods are the SDK's calls (intentledger._transport.Transport); `request` is the
    raw call under them.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        max_backoff: float = 2.0,
    ) -> None:
        self._httpx = import_httpx()
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.client: httpx.Client = self._httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            verify=tls_verification(self.url),
        )

    def close(self) -> None:
        self.client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: dict[str, str] | None = None,
        idempotent: bool = True,
        retry_on: frozenset[int] = RETRY_STATUSES,
        accept: tuple[int, ...] = (200, 201),
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Response:
        """Send one call; retry connection errors and `retry_on` statuses when `idempotent`.

        A call that is not idempotent is retried only when the connection was never made
        (the request cannot have reached the server).
        """
        httpx = self._httpx
        attempt = 0
        last: str = ""
        while True:
            try:
                response = self.client.request(
                    method,
                    path,
                    json=json,
                    headers=headers,
                    params=params,
                    timeout=self.client.timeout if timeout is None else timeout,
                )
            except httpx.TransportError as exc:
                never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                last = f"{type(exc).__name__}: {exc}"
                if (idempotent or never_sent) and attempt < self.retries:
                    self._sleep(attempt)
                    attempt += 1
                    continue
                raise LedgerUnavailable(
                    f"The ledger at {self.url} is unreachable after {attempt + 1} attempt(s) "
                    f"({last}). Check INTENTLEDGER_URL and that the server is running.",
                    code="ledger_unavailable",
                ) from exc
            body = _json_of(response)
            if response.status_code in accept:
                return Response(response.status_code, body, dict(response.headers))
            if response.status_code in retry_on and idempotent and attempt < self.retries:
                last = f"HTTP {response.status_code}"
                self._sleep(attempt, retry_after=response.headers.get("Retry-After"))
                attempt += 1
                continue
            error = error_from_response(response.status_code, body)
            if response.status_code in retry_on:
                raise LedgerUnavailable(
                    f"The ledger at {self.url} answered {response.status_code} after "
                    f"{attempt + 1} attempt(s): {error.message}",
                    code=error.code,
                    status=response.status_code,
                    details=error.details,
                )
            raise error

    # --- the SDK's calls (intentledger._transport.Transport) ----------------------------------

    def create_run(
        self, *, agent: str, input: Any, external_id: str | None, traceparent: str | None = None
    ) -> dict[str, Any]:
        body = {"agent": agent, "input": input, "external_id": external_id}
        headers = {"traceparent": traceparent} if traceparent else None
        # without an external id a repeat would make a second run: sent again only unsent
        return self._body(
            "POST",
            "/api/v1/runs/",
            json=body,
            headers=headers,
            idempotent=external_id is not None,
        )

    def get_run(self, run_id: str, *, wait: int | None = None) -> dict[str, Any]:
        if wait is None:
            return self._body("GET", f"/api/v1/runs/{run_id}/")
        return self._body(
            "GET", f"/api/v1/runs/{run_id}/", params={"wait": wait}, timeout=wait + self.timeout
        )

    def find_runs(
        self, *, agent: str, external_id: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"agent": agent, "external_id": external_id}
        if limit is not None:
            params["limit"] = limit
        body = self._body("GET", "/api/v1/runs/", params=params)
        return list(body.get("runs") or [])

    def journal(self, run_id: str) -> dict[str, Any]:
        return self._body("GET", f"/api/v1/runs/{run_id}/journal")

    def lease(self, run_id: str, *, worker: str, ttl_seconds: int) -> dict[str, Any]:
        body = {"worker": worker, "ttl_seconds": ttl_seconds}
        return self._body("POST", f"/api/v1/runs/{run_id}/lease", json=body)

    def heartbeat(self, run_id: str, *, epoch: int) -> dict[str, Any]:
        return self._write(f"/api/v1/runs/{run_id}/heartbeat", {"epoch": epoch})

    def step_record(self, run_id: str, intent: StepIntent) -> dict[str, Any]:
        return self._write(f"/api/v1/runs/{run_id}/steps/", intent.body())

    def step_outcome(self, run_id: str, outcome: StepOutcome, *, epoch: int) -> dict[str, Any]:
        path = f"/api/v1/runs/{run_id}/steps/{outcome.index}/outcome"
        return self._write(path, outcome.body(epoch=epoch))

    def step_wait(self, run_id: str, index: int, *, wait: int) -> dict[str, Any]:
        return self._body(
            "GET", f"/api/v1/runs/{run_id}/steps/{index}/?wait={wait}", timeout=wait + 15
        )

    def run_complete(self, run_id: str, *, epoch: int, output: Any) -> dict[str, Any]:
        return self._write(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": output})

    def run_fail(self, run_id: str, *, epoch: int, error: Any) -> dict[str, Any]:
        return self._write(f"/api/v1/runs/{run_id}/fail", {"epoch": epoch, "error": error})

    def tool_invoke(self, call: ToolCall) -> Any:
        key = call.idempotency_key
        headers = {"Idempotency-Key": key} if key else {}
        if key and call.epoch is not None:
            headers["Ledger-Epoch"] = str(call.epoch)
        body = self.request(
            "POST",
            f"/api/v1/tools/{call.name}/invoke",
            json={"arguments": call.arguments},
            headers=headers or None,
            # safe to resend either way: with a key the gateway runs it at most once; without
            # one only read tools are accepted (a write is refused with 400)
            idempotent=True,
            retry_on=GATEWAY_RETRY_STATUSES,
        ).body
        return body.get("result") if isinstance(body, dict) else body

    def tools_list(self) -> list[dict[str, Any]]:
        return list(self._body("GET", "/api/v1/tools/")["tools"])

    def mcp_tools_report(self, *, server: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        body = {"server": server, "tools": tools}
        return list(self._body("POST", "/api/v1/mcp/tools/", json=body)["tools"])

    def _body(self, method: str, path: str, **options: Any) -> Any:
        return self.request(method, path, **options).body

    def _write(self, path: str, body: dict[str, Any]) -> Any:
        """A fenced write: 202 is an answer too (a step an approval rule holds)."""
        return self.request("POST", path, json=body, accept=(200, 201, 202)).body

    def _sleep(self, attempt: int, retry_after: str | None = None) -> None:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        if retry_after:
            with contextlib.suppress(ValueError):
                delay = min(self.max_backoff * 4, float(retry_after))
        time.sleep(delay * (0.5 + random.random() / 2))


def _json_of(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return {"error": {"code": f"http_{response.status_code}", "message": response.text[:300]}}


__all__ = ["HttpTransport", "LedgerError", "Response"]
