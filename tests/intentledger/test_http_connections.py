"""The SDK's HTTP transport keeps one connection for a run's calls (HTTP/1.1 keep-alive) and
builds its TLS context once, when the client is built: a connection or a context per call would
cost more than the journal's own work (issue 38)."""

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx._transports.default as transports
import pytest
from intentledger import Ledger


class CountingProxy:
    """A TCP relay in front of the live server that counts the connections clients open."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.accepted = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            server = socket.create_connection(self.upstream)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy(ledger_server: str) -> Iterator[CountingProxy]:
    parts = urlsplit(ledger_server)
    relay = CountingProxy((parts.hostname or "127.0.0.1", parts.port or 80))
    yield relay
    relay.close()


def test_fifty_calls_of_a_run_share_one_connection_and_one_tls_context(
    transactional_db: Any, proxy: CountingProxy, worker_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    contexts: list[object] = []
    build = transports.create_ssl_context

    def counted(verify: object = True, cert: object = None, trust_env: bool = True) -> object:
        contexts.append(verify)
        return build(verify=verify, cert=cert, trust_env=trust_env)  # type: ignore[arg-type]

    monkeypatch.setattr(transports, "create_ssl_context", counted)
    calls = 0
    with Ledger(f"http://127.0.0.1:{proxy.port}", worker_token) as ledger:
        with ledger.run("keepalive", {}, worker="w-k", ttl_seconds=120) as run:  # 2 calls
            calls += 2
            for i in range(24):  # a write step is 2 calls
                run.tool("t.write", {"i": i}, effect="write", fn=lambda i: {"i": i})
                calls += 2
            run.output = {"done": True}
        calls += 1  # complete
    assert calls >= 50
    assert proxy.accepted == 1
    assert len(contexts) == 1 and isinstance(contexts[0], ssl.SSLContext)
