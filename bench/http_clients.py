"""A candidate for the SDK's HTTP client: urllib3's connection pool in place of httpx (issue 46,
item 4). Same calls, same retries and errors as intentledger._http.HttpTransport; only the wire
differs, so bench/sdk_steps.py can run the same steps through either.
"""

from __future__ import annotations

import json as jsonlib
import ssl
from typing import Any
from urllib.parse import urlencode, urlsplit

from intentledger._http import RETRY_STATUSES, HttpTransport, Response
from intentledger.errors import LedgerUnavailable, error_from_response

POOL_SIZE = 10  # connections kept per ledger: the run's thread, its heartbeat, an integration's


class Urllib3Transport(HttpTransport):
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

        self._urllib3 = urllib3
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "Content-Type": "application/json",
        }
        self._timeout = urllib3.Timeout(connect=timeout, read=timeout)
        options: dict[str, Any] = {"timeout": self._timeout, "maxsize": POOL_SIZE, "retries": False}
        if self.url.lower().startswith("https://"):
            options["ssl_context"] = ssl.create_default_context()
        self._prefix = urlsplit(self.url).path
        self.pool = urllib3.connection_from_url(self.url, **options)

    def close(self) -> None:
        self.pool.close()

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
        exceptions = self._urllib3.exceptions
        body = None if json is None else jsonlib.dumps(json, separators=(",", ":")).encode()
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        sent_headers = {**self._headers, **headers} if headers else self._headers
        attempt = 0
        while True:
            try:
                response = self.pool.urlopen(
                    method,
                    target,
                    body=body,
                    headers=sent_headers,
                    retries=False,
                    redirect=False,
                    timeout=self._timeout if timeout is None else timeout,
                )
            except exceptions.HTTPError as exc:
                never_sent = isinstance(exc, exceptions.ConnectTimeoutError)
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
            status = response.status
            answer = _json_of(status, response.data)
            if status in accept:
                return Response(status, answer, dict(response.headers))
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


def _json_of(status: int, content: bytes) -> Any:
    if not content:
        return None
    try:
        return jsonlib.loads(content)
    except ValueError:
        text = content[:300].decode("utf-8", "replace")
        return {"error": {"code": f"http_{status}", "message": text}}


# bench/sdk_steps.py --client: the SDK's HTTP transport over each client
CLIENTS: dict[str, type[HttpTransport]] = {"httpx": HttpTransport, "urllib3": Urllib3Transport}
