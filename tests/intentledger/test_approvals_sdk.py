"""The SDK and approvals, against a real ledger (the web server + PostgreSQL).

A write step an approval rule holds makes `run.tool` wait (a long poll; the heartbeat keeps the
lease) and run the tool once approved; a denial raises ApprovalDenied, which the agent may catch
and go on; `wait_for_approval=False` stops the run with ApprovalPending instead.
"""

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from intentledger import ApprovalDenied, ApprovalPending, Ledger, StopRun

from runs.models import ApprovalRule, Step
from runs.models import Run as RunRow
from runs.services.approvals import step_approve, step_deny

pytestmark = pytest.mark.slow

EMAIL = {"to": "ana@example.com", "subject": "Refund", "body": "Done."}


def mailer(sent: list[Any]) -> Any:
    """An email tool that cannot deduplicate (no idempotency_key parameter)."""

    def send(to: str, subject: str, body: str) -> dict[str, Any]:
        sent.append({"to": to, "subject": subject, "body": body})
        return {"email": len(sent)}

    return send


@pytest.fixture
def ledger(ledger_server: str, worker_token: str, transactional_db: Any) -> Iterator[Ledger]:
    ApprovalRule.objects.create(agent="", tool_pattern="email.*")
    with Ledger(ledger_server, worker_token, retries=2, backoff=0.05) as client:
        yield client


def decide_when_waiting(run_ids: list[str], decide: Any) -> threading.Thread:
    """A supervisor who acts as soon as step 0 of the run waits for approval."""

    def act() -> None:
        for _ in range(200):
            if (
                run_ids
                and Step.objects.filter(
                    run_id=run_ids[0], index=0, state="awaiting_approval"
                ).exists()
            ):
                decide(run_ids[0])
                return
            time.sleep(0.05)

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


def test_the_tool_waits_for_the_approval_then_runs_once(ledger: Ledger) -> None:
    sent: list[dict[str, Any]] = []
    run_ids: list[str] = []
    supervisor = decide_when_waiting(
        run_ids, lambda run_id: step_approve(run_id=run_id, index=0, by="sam")
    )
    with ledger.run("sdk-approve", {}, worker="w-a", on_step=lambda r, s: None) as run:
        run_ids.append(run.id)
        run.tool("email.send", EMAIL, enforced_by="nobody", fn=mailer(sent))
        run.output = {"ok": True}
    supervisor.join(5)
    assert sent == [EMAIL]
    assert RunRow.objects.get(pk=run.id).status == "completed"
    assert Step.objects.get(run_id=run.id, index=0).executions == 1


def test_a_denial_is_approval_denied_and_the_agent_goes_on(ledger: Ledger) -> None:
    sent: list[Any] = []
    run_ids: list[str] = []
    supervisor = decide_when_waiting(
        run_ids,
        lambda run_id: step_deny(run_id=run_id, index=0, by="sam", note="wrong address"),
    )
    with ledger.run("sdk-deny", {}, worker="w-d") as run:
        run_ids.append(run.id)
        with pytest.raises(ApprovalDenied) as denied:
            run.tool("email.send", EMAIL, enforced_by="nobody", fn=mailer(sent))
        assert denied.value.details["note"] == "wrong address"
        run.tool("tickets.comment", {"body": "not mailed"}, fn=lambda body, idempotency_key: 1)
        run.output = {"mailed": False}
    supervisor.join(5)
    assert sent == []
    states = list(Step.objects.filter(run_id=run.id).values_list("state", flat=True))
    assert states == ["denied", "done"]


def test_a_denial_the_agent_does_not_catch_is_a_clean_stop_and_the_run_fails_saying_why(
    ledger: Ledger,
) -> None:
    """The README's agent (`except StopRun`) meets a denial: no traceback, a failed run."""
    sent: list[Any] = []
    run_ids: list[str] = []
    supervisor = decide_when_waiting(
        run_ids,
        lambda run_id: step_deny(run_id=run_id, index=0, by="sam", note="wrong address"),
    )
    try:
        with ledger.run("sdk-deny-uncaught", {}, worker="w-u") as run:
            run_ids.append(run.id)
            run.tool("email.send", EMAIL, enforced_by="nobody", fn=mailer(sent))
            run.output = {"mailed": True}
    except StopRun as stop:
        stopped: StopRun = stop
    supervisor.join(5)
    assert isinstance(stopped, ApprovalDenied) and stopped.details["by"] == "sam"
    row = RunRow.objects.get(pk=run_ids[0])
    assert row.status == "failed"
    assert row.error is not None and row.error["type"] == "ApprovalDenied"
    assert "wrong address" in row.error["message"]
    assert sent == []


def test_without_waiting_the_run_stops_and_a_later_worker_runs_the_approved_step(
    ledger: Ledger,
) -> None:
    sent: list[Any] = []
    run = ledger.run("sdk-nowait", {}, worker="w-n", wait_for_approval=False)
    with pytest.raises(ApprovalPending), run:
        run.tool("email.send", EMAIL, enforced_by="nobody", fn=mailer(sent))
    step_approve(run_id=run.id, index=0, by="sam")
    with ledger.attach(run.id, worker="w-n") as again:  # the same worker name: recovery
        again.tool("email.send", EMAIL, enforced_by="nobody", fn=mailer(sent))
        again.output = {"ok": True}
    assert sent == [EMAIL]
    assert RunRow.objects.get(pk=run.id).status == "completed"
