"""Small helpers the reliability tests share: a live-server worker driver and data snapshots."""

import threading
from collections.abc import Callable
from typing import Any

import httpx
from django.db import connection

from runs.chain import run_chain_breaks
from runs.models import Event, Run, Step


class Worker:
    """The worker API over real HTTP, the way an agent process talks to the ledger."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
        self.client = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def close(self) -> None:
        self.client.close()

    def post(self, path: str, body: Any) -> httpx.Response:
        return self.client.post(path, json=body)

    def create(self, agent: str = "rel", **body: Any) -> dict[str, Any]:
        response = self.post("/api/v1/runs/", {"agent": agent, "input": {}, **body})
        assert response.status_code in (200, 201), response.text
        return response.json()

    def lease(self, run_id: str, worker: str = "w-1", ttl: int = 30) -> httpx.Response:
        return self.post(f"/api/v1/runs/{run_id}/lease", {"worker": worker, "ttl_seconds": ttl})

    def intent(self, run_id: str, epoch: int, index: int, **overrides: Any) -> httpx.Response:
        body = {
            "epoch": epoch,
            "index": index,
            "kind": "tool",
            "name": "tickets.create",
            "effect": "write",
            "enforced_by": "ledger",
            "arguments": {"n": index},
            **overrides,
        }
        return self.post(f"/api/v1/runs/{run_id}/steps/", body)

    def outcome(self, run_id: str, epoch: int, index: int, **overrides: Any) -> httpx.Response:
        body = {
            "epoch": epoch,
            "status": "ok",
            "result": {"done": index},
            "usage": {"input_tokens": 1, "output_tokens": 1},
            **overrides,
        }
        return self.post(f"/api/v1/runs/{run_id}/steps/{index}/outcome", body)

    def run(self, run_id: str) -> dict[str, Any]:
        return self.client.get(f"/api/v1/runs/{run_id}/").json()


def all_at_once(count: int, action: Callable[[int], Any]) -> list[Any]:
    """Run `action(i)` in `count` threads released together by a barrier; return the results."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = action(i)
        except BaseException as exc:  # a thread's failure must fail the test, not vanish
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return results


def snapshot(run_id: str | None = None) -> dict[str, Any]:
    """What a refused request must leave untouched: rows of every journal table and the usage."""
    state: dict[str, Any] = {
        "runs": Run.objects.count(),
        "steps": Step.objects.count(),
        "events": Event.objects.count(),
    }
    if run_id is not None:
        run = Run.objects.get(pk=run_id)
        state["run"] = (
            run.status,
            run.epoch,
            run.step_count,
            run.used_steps,
            run.used_tokens,
            run.used_cost_usd,
            run.used_recoveries,
            run.event_seq,
            run.event_head,
            run.output,
        )
    return state


def chain_intact(run_id: str) -> bool:
    return not run_chain_breaks(Run.objects.get(pk=run_id))


def terminate_backends(database: str) -> int:
    """pg_terminate_backend every connection to `database` except this test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0
