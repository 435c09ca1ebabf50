"""Approvals on the SDK's main tool call: `run.tool("email.send", ...)` without `fn=`, the
one-call gateway step (`"invoke": true`), against a real ledger (the web server + PostgreSQL).

Held by an approval rule, the one-call step answers 202 `awaiting_approval` (as the three-call
form does); the SDK waits for the decision and then runs the tool once, or raises
ApprovalDenied with nothing sent. A worker killed while it waits is replaced by one that waits
again and sends once.
"""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from intentledger import ApprovalDenied, Ledger
from rest_framework.test import APIClient

from dashboard.roles import SUPERVISORS
from runs.models import ApprovalRule, Step
from runs.models import Run as RunRow
from runs.services.approvals import step_approve
from tests.processes import SmtpSink
from tests.review.factories import user_in
from tools.models import OutboundEmail

pytestmark = pytest.mark.slow

EMAIL = {"to": "ana@example.com", "subject": "Refund", "body": "Done."}


@pytest.fixture
def ledger(agent_ledger_url: str, worker_token: str, transactional_db: Any) -> Iterator[Ledger]:
    """The SDK against a ledger whose email.send reaches the test's SMTP sink."""
    ApprovalRule.objects.create(agent="", tool_pattern="email.*")
    with Ledger(agent_ledger_url, worker_token, retries=2, backoff=0.05) as client:
        yield client


def when_waiting(run_ids: list[str], decide: Any, *, epoch_above: int = 0) -> threading.Thread:
    """A supervisor who acts once step 0 of the run waits for approval (under a lease of an
    epoch above `epoch_above`: a worker that attached after the first one)."""

    def act() -> None:
        for _ in range(1200):
            if (
                run_ids
                and Step.objects.filter(
                    run_id=run_ids[0], index=0, state="awaiting_approval"
                ).exists()
                and RunRow.objects.filter(
                    pk=run_ids[0], epoch__gt=epoch_above, lease_worker__isnull=False
                ).exists()
            ):
                decide(run_ids[0])
                return
            time.sleep(0.05)

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


def emails_to(address: str, sink: SmtpSink) -> int:
    """Emails to `address`: the gateway's rows, which must agree with what the sink received."""
    rows = OutboundEmail.objects.filter(to=address).count()
    assert len(sink.to(address)) == rows
    return rows


def email_to(address: str) -> dict[str, str]:
    return {**EMAIL, "to": address}


def on_the_dashboard(action: str, note: str = "") -> Any:
    """A supervisor's approve or deny button on the item page (a logged-in client)."""
    client = Client()
    client.force_login(user_in(SUPERVISORS, "sam"))

    def press(run_id: str) -> None:
        answer = client.post(f"/queue/{run_id}/0/{action}", {"note": note}, follow=True)
        assert answer.status_code == 200
        messages = [str(m) for m in answer.context["messages"]] if answer.context else []
        assert not any("nothing to approve" in m for m in messages), messages

    return press


def test_the_gateway_tool_waits_for_the_approval_then_sends_once(
    ledger: Ledger, smtp_sink: SmtpSink
) -> None:
    to = "approved@example.com"
    run_ids: list[str] = []
    supervisor = when_waiting(run_ids, on_the_dashboard("approve"))
    with ledger.run("sdk-one-call-approve", {}, worker="w-1a") as run:
        run_ids.append(run.id)
        sent = run.tool("email.send", email_to(to))
        run.output = {"sent": sent}
    supervisor.join(10)
    assert emails_to(to, smtp_sink) == 1
    assert RunRow.objects.get(pk=run.id).status == "completed"
    step = Step.objects.get(run_id=run.id, index=0)
    assert (step.state, step.executions) == ("done", 1)


def test_a_denied_gateway_tool_raises_approval_denied_and_sends_nothing(
    ledger: Ledger, smtp_sink: SmtpSink
) -> None:
    to = "denied@example.com"
    run_ids: list[str] = []
    supervisor = when_waiting(run_ids, on_the_dashboard("deny", "wrong address"))
    with ledger.run("sdk-one-call-deny", {}, worker="w-1d") as run:
        run_ids.append(run.id)
        with pytest.raises(ApprovalDenied) as denied:
            run.tool("email.send", email_to(to))
        assert denied.value.code == "approval_denied"
        assert denied.value.details["note"] == "wrong address"
        run.output = {"mailed": False}
    supervisor.join(10)
    assert emails_to(to, smtp_sink) == 0
    assert RunRow.objects.get(pk=run.id).status == "completed"
    assert Step.objects.get(run_id=run.id, index=0).state == "denied"


WAITING_WORKER = textwrap.dedent(
    """
    import sys
    from intentledger import Ledger
    with Ledger(sys.argv[1], sys.argv[2]) as ledger:
        with ledger.run("sdk-one-call-crash", {}, external_id="crash-1", worker="pod-1") as run:
            print(run.id, flush=True)
            run.tool("email.send", {"to": "crash@example.com", "subject": "Refund", "body": "Done."})
            run.output = {"ok": True}
    """
)


def test_a_worker_killed_while_waiting_is_replaced_by_one_that_waits_then_sends_once(
    ledger: Ledger, agent_ledger_url: str, worker_token: str, smtp_sink: SmtpSink
) -> None:
    to = "crash@example.com"
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITING_WORKER, agent_ledger_url, worker_token],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        for _ in range(1200):  # the first worker waits for people
            if Step.objects.filter(run_id=run_id, index=0, state="awaiting_approval").exists():
                break
            assert proc.poll() is None, "the worker ended instead of waiting for the approval"
            time.sleep(0.05)
        else:
            raise AssertionError("step 0 never waited for approval")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    first_epoch = RunRow.objects.get(pk=run_id).epoch
    assert emails_to(to, smtp_sink) == 0

    # the pod's replacement, under the same name, waits again; the approval comes meanwhile
    supervisor = when_waiting(
        [run_id],
        lambda run_id: step_approve(run_id=run_id, index=0, by="sam"),
        epoch_above=first_epoch,
    )
    with ledger.attach(run_id, worker="pod-1") as again:
        again.tool("email.send", email_to(to))
        again.output = {"ok": True}
    supervisor.join(10)
    assert emails_to(to, smtp_sink) == 1
    assert RunRow.objects.get(pk=run_id).status == "completed"
    assert Step.objects.get(run_id=run_id, index=0).executions == 1


def one_call(client: Any, url: str, run_id: str, epoch: int, **extra: Any) -> Any:
    body = {
        "epoch": epoch,
        "index": 0,
        "kind": "tool",
        "name": "email.send",
        "effect": "write",
        "arguments": EMAIL,
        "invoke": True,
        **extra,
    }
    return client.post(url.format(run_id=run_id), body, format="json")


def leased_run(api: APIClient, agent: str) -> tuple[str, int]:
    run = api.post("/api/v1/runs/", {"agent": agent, "input": {}}, format="json").json()
    grant = api.post(f"/api/v1/runs/{run['id']}/lease", {"worker": "w"}, format="json").json()
    return run["id"], int(grant["epoch"])


def test_the_one_call_step_held_for_approval_answers_202_at_both_doors(
    api: APIClient, transactional_db: Any
) -> None:
    """The lean path (a body it knows) and the DRF view (a field only DRF ignores) agree: 202
    with the step awaiting_approval, the first time and when the worker asks again."""
    ApprovalRule.objects.create(agent="", tool_pattern="email.*")
    url = "/api/v1/runs/{run_id}/steps/"
    lean_run, lean_epoch = leased_run(api, "one-call-lean")
    drf_run, drf_epoch = leased_run(api, "one-call-drf")
    for _ in range(2):
        lean = one_call(api, url, lean_run, lean_epoch)
        drf = one_call(api, url, drf_run, drf_epoch, comment="not a field of the lean path")
        assert (lean.status_code, lean.json()["state"]) == (202, "awaiting_approval")
        assert (drf.status_code, drf.json()["state"]) == (202, "awaiting_approval")
    assert OutboundEmail.objects.count() == 0
