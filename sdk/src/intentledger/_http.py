"""HTTP to the ledger: JSON in and out, typed errors, retries with backoff for idempotent calls.

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

from intentledger.errors import LedgerError, LedgerUnavailable, error_from_response

if TYPE_CHECKING:
    import httpx

RETRY_STATUSES = frozenset({500, 502, 503, 504})


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


class Transport:
    """One connection pool per Ledger; safe to share with the heartbeat thread."""

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


__all__ = ["LedgerError", "Response", "Transport"]
