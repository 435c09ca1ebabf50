"""Two web nodes serve one ledger: a worker may spread its calls over both, and a token revoked
through one process is refused by every node once their one-second token cache has turned over.
"""

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from runs.authentication import hash_token
from runs.chain import run_chain_breaks
from runs.models import Run, WorkerToken
from runs.tokens import worker_token_create, worker_token_revoke
from tests.processes import start_web_server, stop_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_nodes(django_db_setup: Any) -> Iterator[tuple[str, str]]:
    """Two web nodes (2 worker processes each) on the one test database, started side by
    side, for the module: they keep nothing between requests but the token cache. The tests take
    `transactional_db`, so what they write is committed."""
    with ThreadPoolExecutor(max_workers=2) as starting:
        started = list(
            starting.map(
                lambda name: start_web_server(workers=2, threads=2, log_name=name),
                ("node-a", "node-b"),
            )
        )
    try:
        yield started[0][0], started[1][0]
    finally:
        for _url, proc in started:
            stop_process(proc)


def test_a_worker_spreading_its_calls_over_two_web_nodes_journals_one_clean_run(
    transactional_db: Any, two_nodes: tuple[str, str]
) -> None:
    _, token = worker_token_create(name="spread")
    headers = {"Authorization": f"Bearer {token}"}
    node_a, node_b = two_nodes
    with (
        httpx.Client(base_url=node_a, headers=headers) as a,
        httpx.Client(base_url=node_b, headers=headers) as b,
    ):
        nodes = itertools.cycle([a, b])
        run_id = next(nodes).post("/api/v1/runs/", json={"agent": "spread"}).json()["id"]
        epoch = (
            next(nodes).post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w"}).json()["epoch"]
        )
        for i in range(10):
            intent = next(nodes).post(
                f"/api/v1/runs/{run_id}/steps/",
                json={"epoch": epoch, "index": i, "kind": "tool", "name": "t", "effect": "write",
                      "enforced_by": "ledger", "arguments": {"i": i}},
            )  # fmt: skip
            assert intent.status_code == 201, intent.text
            outcome = next(nodes).post(
                f"/api/v1/runs/{run_id}/steps/{i}/outcome",
                json={"epoch": epoch, "status": "ok", "result": {"i": i}},
            )
            assert outcome.status_code == 200, outcome.text
        # a replay on the other node answers what the first recorded
        replay = next(nodes).post(
            f"/api/v1/runs/{run_id}/steps/",
            json={"epoch": epoch, "index": 3, "kind": "tool", "name": "t", "effect": "write",
                  "enforced_by": "ledger", "arguments": {"i": 3}},
        )  # fmt: skip
        assert replay.status_code == 200 and replay.json()["result"] == {"i": 3}
        done = next(nodes).post(f"/api/v1/runs/{run_id}/complete", json={"epoch": epoch})
        assert done.status_code == 200
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.step_count, run.used_steps) == ("completed", 10, 10)
    assert run_chain_breaks(run) == []


def test_a_revoked_token_is_refused_by_every_node_on_the_very_next_call(
    transactional_db: Any, two_nodes: tuple[str, str]
) -> None:
    _, token = worker_token_create(name="leaving")
    headers = {"Authorization": f"Bearer {token}"}
    node_a, node_b = two_nodes
    with (
        httpx.Client(base_url=node_a, headers=headers) as a,
        httpx.Client(base_url=node_b, headers=headers) as b,
    ):
        run_id = a.post("/api/v1/runs/", json={"agent": "leaving"}).json()["id"]
        # every worker process of both nodes reads and caches the token
        for _ in range(8):
            for node in (a, b):
                beat = node.post(f"/api/v1/runs/{run_id}/heartbeat", json={"epoch": 0})
                assert beat.status_code == 200, beat.text

        worker_token_revoke(token_id=WorkerToken.objects.get(token_hash=hash_token(token)).pk)

        for _ in range(4):  # reaches each worker process of each node
            for node in (a, b):
                refused = node.post(f"/api/v1/runs/{run_id}/heartbeat", json={"epoch": 0})
                assert refused.status_code == 401, (str(node.base_url), refused.text)
                lease = node.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w"})
                assert lease.status_code == 401
    assert Run.objects.get(pk=run_id).epoch == 0  # nothing was written after the revocation
