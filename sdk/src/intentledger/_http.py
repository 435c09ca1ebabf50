"""HTTP to the ledger (the default transport, the public contract): JSON in and out, typed
errors, retries with backoff for idempotent calls.

The wire is urllib3's connection pool: one keep-alive connection per thread that calls (the
run's, its heartbeat's), TLS verified against the system's trust store (`SSL_CERT_FILE` and
`SSL_CERT_DIR` honoured) with one context per client, proxies from the environment
(`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`), no redirects followed. httpx was the
wire before; bench/SERVERS.md measures the agent's CPU per call over each.

urllib3 is imported when the first client is built, not when `intentledger` is imported, so an
agent process that only imports the SDK pays nothing for it.
"""

from __future__ import annotations

import contextlib
import json as jsonlib
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from intentledger._transport import StepIntent, StepOutcome, ToolCall
from intentledger.errors import LedgerError, LedgerUnavailable, error_from_response

if TYPE_CHECKING:
    import urllib3

RETRY_STATUSES = frozenset({500, 502, 503, 504})
# 502 from the gateway is the tool's own stored failure (`tool_failed`), not an outage
GATEWAY_RETRY_STATUSES = frozenset({500, 503, 504})
# connections kept per client: the run's thread, its heartbeat, an integration's worker threads
POOL_SIZE = 10


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`; none
    for a host `NO_PROXY` lists), as curl, requests and httpx read them."""
    import urllib.request

    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme.lower()) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.netloc):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def connection_pool(url: str, timeout: float) -> urllib3.PoolManager | urllib3.HTTPConnectionPool:
    """Where the calls to `url` go: a pool of kept connections to the ledger, or through the
    environment's proxy. No retries or redirects of its own (HttpTransport.request retries)."""
    import urllib3

    options: dict[str, Any] = {
        "timeout": urllib3.Timeout(connect=timeout, read=timeout),
        "maxsize": POOL_SIZE,
        "retries": False,
    }
    if url.lower().startswith("https://"):
        import ssl  # (not at `import intentledger`: a tenth of its import time)

        options["ssl_context"] = ssl.create_default_context()  # built once, not per connection
    proxy = proxy_for(url)
    if proxy is not None:
        return urllib3.ProxyManager(proxy, **options)
    return urllib3.connection_from_url(url, **options)


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
        import urllib3

        self._errors = urllib3.exceptions
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.pool = connection_pool(self.url, timeout)
        # a pool takes paths; through a proxy the manager takes whole URLs
        if isinstance(self.pool, urllib3.PoolManager):
            self._base, self._close = self.url, self.pool.clear
        else:
            self._base, self._close = urlsplit(self.url).path, self.pool.close
        self._timeout = urllib3.Timeout(connect=timeout, read=timeout)
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "Content-Type": "application/json",
        }

    def close(self) -> None:
        self._close()

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
        body = None if json is None else _dumps(json)
        target = self._base + path + (f"?{urlencode(params)}" if params else "")
        sent = {**self._headers, **headers} if headers else self._headers
        attempt = 0
        while True:
            try:
                response = self.pool.urlopen(
                    method,
                    target,
                    body=body,
                    headers=sent,
                    retries=False,
                    redirect=False,
                    timeout=self._timeout if timeout is None else timeout,
                )
            except self._errors.HTTPError as exc:
                # a refused or timed-out connection, a name that does not resolve, an unreachable
                # proxy: the request never left
                never_sent = isinstance(
                    exc, self._errors.ConnectTimeoutError | self._errors.ProxyError
                )
                if (idempotent or never_sent) and attempt < self.retries:
                    self._sleep(attempt)
                    attempt += 1
                    continue
                raise LedgerUnavailable(
                    f"The ledger at {self.url} is unreachable after {attempt + 1} attempt(s) "
                    f"({type(exc).__name__}: {exc}). Check INTENTLEDGER_URL and that the server "
                    "is running.",
                    code="ledger_unavailable",
                ) from exc
            status = response.status
            answer = _json_of(status, response.data)
            if status in accept:
                return Response(status, answer, {k.lower(): v for k, v in response.headers.items()})
            if status in retry_on and idempotent and attempt < self.retries:
                self._sleep(attempt, retry_after=response.headers.get("Retry-After"))
                attempt += 1
                continue
            error = error_from_response(status, answer)
            if status in retry_on:
                raise LedgerUnavailable(
                    f"The ledger at {self.url} answered {status} after "
                    f"{attempt + 1} attempt(s): {error.message}",
                    code=error.code,
                    status=status,
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


def _dumps(value: Any) -> bytes:
    """The body as httpx sent it: compact JSON, UTF-8, no NaN (the ledger refuses it)."""
    return jsonlib.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _json_of(status: int, content: bytes) -> Any:
    if not content:
        return None
    try:
        return jsonlib.loads(content)
    except ValueError:
        text = content[:300].decode("utf-8", "replace")
        return {"error": {"code": f"http_{status}", "message": text}}


__all__ = ["HttpTransport", "LedgerError", "Response"]
