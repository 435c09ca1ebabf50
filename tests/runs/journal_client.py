"""A thin test-side driver of the worker API, so tests read like the story they tell."""

from typing import Any

from rest_framework.test import APIClient


class JournalClient:
    def __init__(self, api: APIClient) -> None:
        self.api = api

    def create(self, agent: str = "support", **body: Any) -> dict[str, Any]:
        response = self.api.post("/api/v1/runs/", {"agent": agent, "input": {}, **body})
        assert response.status_code in (200, 201), response.content
        return response.json()

    def lease(self, run_id: str, worker: str = "w-1", ttl: int = 30) -> Any:
        return self.api.post(f"/api/v1/runs/{run_id}/lease", {"worker": worker, "ttl_seconds": ttl})

    def intent(self, run_id: str, epoch: int, index: int, **overrides: Any) -> Any:
        body = {
            "epoch": epoch,
            "index": index,
            "kind": "tool",
            "name": f"tool.{index}",
            "effect": "write",
            "enforced_by": "ledger",
            "arguments": {"n": index},
            **overrides,
        }
        return self.api.post(f"/api/v1/runs/{run_id}/steps/", body)

    def read(self, run_id: str, epoch: int, index: int, tokens: int = 0, **overrides: Any) -> Any:
        outcome = {"status": "ok", "result": {"answer": index}, "usage": {"input_tokens": tokens}}
        return self.intent(
            run_id,
            epoch,
            index,
            kind="model",
            name="model.chat",
            effect="read",
            enforced_by=None,
            outcome=outcome,
            **overrides,
        )

    def outcome(
        self, run_id: str, epoch: int, index: int, tokens: int = 0, **overrides: Any
    ) -> Any:
        body = {
            "epoch": epoch,
            "status": "ok",
            "result": {"done": index},
            "usage": {"input_tokens": tokens, "output_tokens": 0},
            **overrides,
        }
        return self.api.post(f"/api/v1/runs/{run_id}/steps/{index}/outcome", body)

    def write_step(self, run_id: str, epoch: int, index: int, tokens: int = 0) -> None:
        assert self.intent(run_id, epoch, index).status_code == 201
        assert self.outcome(run_id, epoch, index, tokens=tokens).status_code == 200

    def journal(self, run_id: str) -> dict[str, Any]:
        return self.api.get(f"/api/v1/runs/{run_id}/journal").json()

    def run(self, run_id: str) -> dict[str, Any]:
        return self.api.get(f"/api/v1/runs/{run_id}/").json()
