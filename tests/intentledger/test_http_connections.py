"""The SDK's HTTP transport keeps one connection for a run's calls (HTTP/1.1 keep-alive): a
connection per call would cost more than the journal's own work (issue 38)."""

from collections.abc import Iterator
from typing import Any

import pytest
from intentledger import Ledger

from tests.scale.helpers import RoundRobinBalancer


@pytest.fixture
def balancer(ledger_server: str) -> Iterator[RoundRobinBalancer]:
    """A TCP relay in front of the live server that counts the connections clients open."""
    relay = RoundRobinBalancer([ledger_server])
    yield relay
    relay.close()


def test_fifty_calls_of_a_run_share_one_connection(
    transactional_db: Any, balancer: RoundRobinBalancer, worker_token: str
) -> None:
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
