"""A bare worker-API driver over httpx (one keep-alive connection): what the wire costs.

The SDK (intentledger) is measured separately when it is installed; this driver is the floor
any client pays: JSON encoding, one HTTP request per call, nothing else.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx


class JournalDriver:
    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def close(self) -> None:
        self.http.close()

    def _check(self, response: httpx.Response, *ok: int) -> Any:
        if response.status_code not in ok:
            raise RuntimeError(
                f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text[:300]}"
            )
        return response.json()

    def create(self, agent: str = "bench", external_id: str | None = None) -> str:
        body: dict[str, Any] = {"agent": agent, "input": {"bench": True}}
        if external_id:
            body["external_id"] = external_id
        return str(self._check(self.http.post("/api/v1/runs/", json=body), 200, 201)["id"])

    def lease(self, run_id: str, worker: str | None = None, ttl: int = 60) -> dict[str, Any]:
        body = {"worker": worker or f"bench-{uuid.uuid4().hex[:8]}", "ttl_seconds": ttl}
        result: dict[str, Any] = self._check(
            self.http.post(f"/api/v1/runs/{run_id}/lease", json=body), 200
        )
        return result

    def write_intent(self, run_id: str, epoch: int, index: int, arguments: dict[str, Any]) -> Any:
        body = {
            "epoch": epoch,
            "index": index,
            "kind": "tool",
            "name": "bench.write",
            "effect": "write",
            "enforced_by": "tool",
            "arguments": arguments,
        }
        return self._check(self.http.post(f"/api/v1/runs/{run_id}/steps/", json=body), 200, 201)

    def outcome(self, run_id: str, epoch: int, index: int, result: Any) -> Any:
        body = {
            "epoch": epoch,
            "status": "ok",
            "result": result,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        return self._check(
            self.http.post(f"/api/v1/runs/{run_id}/steps/{index}/outcome", json=body), 200
        )

    def read_step(
        self, run_id: str, epoch: int, index: int, arguments: dict[str, Any], result: Any
    ) -> Any:
        body = {
            "epoch": epoch,
            "index": index,
            "kind": "model",
            "name": "bench.read",
            "effect": "read",
            "arguments": arguments,
            "outcome": {
                "status": "ok",
                "result": result,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        }
        return self._check(self.http.post(f"/api/v1/runs/{run_id}/steps/", json=body), 200, 201)

    def complete(self, run_id: str, epoch: int) -> Any:
        return self._check(
            self.http.post(f"/api/v1/runs/{run_id}/complete", json={"epoch": epoch, "output": {}}),
            200,
        )

    def journal(self, run_id: str) -> Any:
        return self._check(self.http.get(f"/api/v1/runs/{run_id}/journal"), 200)
