"""The HTTP clients the SDK's transport is measured over (bench/part_servers.py, issue 46 item 4).

`urllib3` is intentledger's own HttpTransport. `httpx` is the same transport over httpx, as the
SDK was before it moved to urllib3 (same calls, retries and errors; only the wire differs).
`http.client` is the floor: the standard library's connection, headers and body in one send, one
kept connection behind a lock, no proxies; for comparison only.
"""

from __future__ import annotations

import http.client
import threading
from typing import Any
from urllib.parse import urlsplit

from intentledger._http import RETRY_STATUSES, HttpTransport, Response, _json_of
from intentledger.errors import LedgerUnavailable, error_from_response


class HttpxTransport(HttpTransport):
    def __init__(
        self, url: str, token: str, *, timeout: float, retries: int, backoff: float
    ) -> None:
        import httpx

        self.url, self.timeout, self.retries = url.rstrip("/"), timeout, retries
        self.backoff, self.max_backoff = backoff, 2.0

        self._httpx = httpx
        self.client = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=self.timeout,
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
        httpx = self._httpx
        attempt = 0
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
                if (idempotent or never_sent) and attempt < self.retries:
                    self._sleep(attempt)
                    attempt += 1
                    continue
                raise LedgerUnavailable(str(exc), code="ledger_unavailable") from exc
            body = _json_of(response.status_code, response.content)
            if response.status_code in accept:
                return Response(response.status_code, body, dict(response.headers))
            if response.status_code in retry_on and idempotent and attempt < self.retries:
                self._sleep(attempt, retry_after=response.headers.get("Retry-After"))
                attempt += 1
                continue
            raise error_from_response(response.status_code, body)


class HttpClientTransport(HttpTransport):
    def __init__(self, url: str, token: str, **options: Any) -> None:
        super().__init__(url, token, **options)
        super().close()  # the urllib3 pool is not used
        parts = urlsplit(self.url)
        self._connection = http.client.HTTPConnection(
            parts.hostname or "", parts.port, timeout=self.timeout
        )
        self._lock = threading.Lock()
        self.pool = _OneConnection(self)  # type: ignore[assignment]

    def close(self) -> None:
        self._connection.close()


class _OneConnection:
    """What HttpTransport.request calls on its pool (`urlopen`), over one http.client connection."""

    def __init__(self, transport: HttpClientTransport) -> None:
        self.transport = transport

    def urlopen(self, method: str, target: str, *, body: Any, headers: Any, **_: Any) -> Any:
        transport = self.transport
        with transport._lock:
            connection = transport._connection
            try:
                connection.request(method, target, body=body, headers=headers)
                response = connection.getresponse()
            except (ConnectionError, http.client.HTTPException):
                connection.close()  # the server closed the kept connection: once more
                connection.request(method, target, body=body, headers=headers)
                response = connection.getresponse()
            data = response.read()
        return _Answer(response.status, data, dict(response.getheaders()))


class _Answer:
    def __init__(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        self.status, self.data, self.headers = status, data, headers


# bench/sdk_steps.py --client: the SDK's HTTP transport over each client
CLIENTS: dict[str, type[HttpTransport]] = {
    "httpx": HttpxTransport,
    "urllib3": HttpTransport,
    "http.client": HttpClientTransport,
}
