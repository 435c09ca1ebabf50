"""The story the trace tests export: a support run joined to its caller's trace, with a model
call, a crash and its recovery, replayed intents, a person's decision on a maybe-sent email and
a failed step; and a second run with a trace of its own."""

from dataclasses import dataclass
from typing import Any

from rest_framework.test import APIClient

from runs.services.decisions import step_resolve
from tests.runs.journal_client import JournalClient

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SECRET = "s3cret-customer-text"  # in arguments and results: never in a span by default
MODEL_ARGS = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": SECRET}]}


@dataclass
class Story:
    run_id: str  # joined to the caller's trace
    other_run_id: str  # a trace of its own
    keys: list[str]  # every idempotency key the runs were given


def told(api: APIClient, fake_clock: Any, worker_token: str) -> Story:
    journal = JournalClient(api)
    created = api.post(
        "/api/v1/runs/",
        {"agent": "support", "input": {"customer": SECRET}},
        HTTP_TRACEPARENT=TRACEPARENT,
    )
    assert created.status_code == 201, created.content
    run_id = created.json()["id"]
    keys: list[str] = []

    def intent(epoch: int, index: int, **step: Any) -> Any:
        response = journal.intent(run_id, epoch, index, **step)
        assert response.status_code in (200, 201), response.content
        keys.append(response.json()["idempotency_key"])
        return response

    model = {
        "kind": "model",
        "name": "llm",
        "effect": "read",
        "enforced_by": None,
        "arguments": MODEL_ARGS,
        "outcome": {
            "status": "ok",
            "result": {"text": SECRET},
            "usage": {"input_tokens": 120, "output_tokens": 30, "cost_usd": "0.0042"},
        },
    }
    ticket = {"name": "tickets.create", "enforced_by": "tool", "arguments": {"body": SECRET}}
    comment = {"name": "tickets.comment", "enforced_by": "tool", "arguments": {"body": "hi"}}
    email = {"name": "email.send", "enforced_by": "nobody", "arguments": {"to": SECRET}}

    # worker 1: a model call, a ticket, then it dies with the comment's intent open
    epoch = journal.lease(run_id, worker="w-1").json()["epoch"]
    intent(epoch, 0, **model)
    intent(epoch, 1, **ticket)
    assert journal.outcome(run_id, epoch, 1, result={"ticket": SECRET}).status_code == 200
    intent(epoch, 2, **comment)
    fake_clock.advance(seconds=31)

    # worker 2 recovers: steps 0 and 1 replayed from the journal, the comment made again
    recovered = journal.lease(run_id, worker="w-2")
    assert recovered.status_code == 200, recovered.content
    epoch = recovered.json()["epoch"]
    assert intent(epoch, 0, **model).status_code == 200  # replayed
    assert intent(epoch, 1, **ticket).status_code == 200  # replayed
    assert intent(epoch, 2, **comment).status_code == 201  # interrupted: made again
    assert journal.outcome(run_id, epoch, 2).status_code == 200
    # the email's intent, then worker 2 dies too: nobody can tell whether it went out
    intent(epoch, 3, **email)
    fake_clock.advance(seconds=31)
    refused = journal.lease(run_id, worker="w-3")
    assert refused.json()["error"]["code"] == "needs_review", refused.content

    # a person decides: it was sent
    step_resolve(run_id=run_id, index=3, action="sent", note="in the outbox", by="alice")

    # worker 3 finishes: a tool that fails, then the run completes
    epoch = journal.lease(run_id, worker="w-3").json()["epoch"]
    intent(epoch, 4, name="tickets.close", enforced_by="tool", arguments={"ticket_id": 1})
    failed = journal.outcome(run_id, epoch, 4, status="error", result={"error": SECRET})
    assert failed.status_code == 200, failed.content
    completed = api.post(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": {}})
    assert completed.status_code == 200, completed.content

    # another run, no caller's trace: one read step, completed
    other = journal.create()["id"]
    epoch = journal.lease(other, worker="w-9").json()["epoch"]
    assert journal.read(other, epoch, 0, tokens=5).status_code == 201
    api.post(f"/api/v1/runs/{other}/complete", {"epoch": epoch, "output": {}})
    keys.append(journal.journal(other)["steps"][0]["idempotency_key"])
    return Story(run_id=run_id, other_run_id=other, keys=[*keys, worker_token])
