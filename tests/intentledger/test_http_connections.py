"""The SDK's HTTP transport keeps one connection for a run's calls (HTTP/1.1 keep-alive) and
builds its TLS context once, when the client is built: a connection or a context per call would
cost more than the journal's own work (issue 38)."""

import ssl
from collections.abc import Iterator
from typing import Any

import httpx._transports.default as transports
import pytest
from intentledger import Ledger

from tests.scale.helpers import RoundRobinBalancer


@pytest.fixture
def balancer(ledger_server: str) -> Iterator[RoundRobinBalancer]:
    """A TCP relay in front of the live server that counts the connections clients open."""
    relay = RoundRobinBalancer([ledger_server])
    yield relay
    relay.close()


def test_fifty_calls_of_a_run_share_one_connection_and_one_tls_context(
    transactional_db: Any,
    balancer: RoundRobinBalancer,
    worker_token: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    contexts: list[object] = []
    build = transports.create_ssl_context

    def counted(verify: object = True, cert: object = None, trust_env: bool = True) -> object:
        contexts.append(verify)
        return build(verify=verify, cert=cert, trust_env=trust_env)  # type: ignore[arg-type]

    monkeypatch.setattr(transports, "create_ssl_context", counted)
    calls = 0
    with Ledger(balancer.url, worker_token) as ledger:
        with ledger.run("keepalive", {}, worker="w-k", ttl_seconds=120) as run:  # 2 calls
            calls += 2
            for i in range(24):  # a write step is 2 calls
                run.tool("t.write", {"i": i}, effect="write", fn=lambda i: {"i": i})
                calls += 2
            run.output = {"done": True}
        calls += 1  # complete
    assert calls >= 50
    assert sum(balancer.served.values()) == 1
    assert len(contexts) == 1 and isinstance(contexts[0], ssl.SSLContext)
