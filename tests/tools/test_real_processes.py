"""Exactly once over real HTTP, real SMTP and a real SIGKILL.

50 concurrent invokes of email.send with one key reach the web server (2 workers x 4 threads) that
mails to an aiosmtpd server this test started; a web server killed mid-tool leaves its key
in_progress, which the journal's recovery turns into an `unknown` step once the lock is stale.
"""

import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import override_settings

from runs.models import Event
from runs.services.creation import run_create
from runs.services.enforcement import runs_reap_expired_leases
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.conftest import FakeClock, chain_problems
from tests.tools.conftest import SmtpRecorder
from tools.models import IdempotencyKey, KeyStatus, OutboundEmail
from tools.selectors import key_state_for_recovery as idempotency_state_for_recovery
from tools.support import message_id_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EMAIL = {
    "to": "customer@example.com",
    "subject": "About your double charge",
    "body": "We refunded the duplicate charge today.",
}


def _journalled_intent(name: str, arguments: dict[str, Any]) -> tuple[Any, Any]:
    """A run under lease with step 0's write intent journalled: the key a worker sends."""
    run, _ = run_create(agent="support", input={}, actor="test")
    grant = run_lease_acquire(run_id=run.pk, worker="w-1", ttl_seconds=30, actor="test")
    step = step_intent_record(
        run_id=run.pk,
        epoch=grant.epoch,
        index=0,
        kind="tool",
        name=name,
        effect="write",
        enforced_by="ledger",
        arguments=arguments,
        actor="test",
    ).step
    return run, step


def test_fifty_concurrent_sends_with_one_key_make_one_email_row_and_one_smtp_message(
    tools_server: str, smtp_server: SmtpRecorder, worker_token: str
) -> None:
    run, step = _journalled_intent("email.send", EMAIL)
    key = step.idempotency_key
    start = threading.Barrier(50)

    def send(_: int) -> httpx.Response:
        with httpx.Client(base_url=tools_server, timeout=60) as client:
            start.wait()
            return client.post(
                "/api/v1/tools/email.send/invoke",
                json={"arguments": EMAIL},
                headers={"Authorization": f"Bearer {worker_token}", "Idempotency-Key": key},
            )

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(send, range(50)))

    statuses = [r.status_code for r in responses]
    executed = [
        r for r in responses if r.status_code == 200 and "Idempotent-Replayed" not in r.headers
    ]
    replayed = [r for r in responses if r.headers.get("Idempotent-Replayed") == "true"]
    in_progress = [r for r in responses if r.status_code == 409]
    print(f"executed={len(executed)} replayed={len(replayed)} in_progress={len(in_progress)}")
    assert set(statuses) <= {200, 409}, statuses
    assert len(executed) == 1
    assert len(executed) + len(replayed) + len(in_progress) == 50
    assert all(r.json() == executed[0].json() for r in replayed)
    assert all(r.json()["error"]["code"] == "idempotency_in_progress" for r in in_progress)

    late = httpx.post(  # once the first finished, everyone gets its stored response
        f"{tools_server}/api/v1/tools/email.send/invoke",
        json={"arguments": EMAIL},
        headers={"Authorization": f"Bearer {worker_token}", "Idempotency-Key": key},
    )
    assert late.status_code == 200
    assert late.headers["Idempotent-Replayed"] == "true"
    assert late.json() == executed[0].json()

    assert OutboundEmail.objects.filter(idempotency_key=key).count() == 1
    assert len(smtp_server.with_message_id(message_id_for(key))) == 1
    row = IdempotencyKey.objects.get(key=key)
    assert (row.state, row.response) == (KeyStatus.COMPLETED, executed[0].json())
    # the gateway recorded the step's outcome once, with the key's completion
    step.refresh_from_db()
    assert (step.state, step.result) == ("done", executed[0].json()["result"])
    assert Event.objects.filter(run=run, type="step_done").count() == 1
    assert chain_problems(run.pk) == []


def test_a_server_killed_mid_tool_leaves_the_key_in_progress_and_recovery_marks_the_step_unknown(
    killable_server: Callable[[], tuple[str, Any]],
    worker_token: str,
    tmp_path: Path,
    fake_clock: FakeClock,
) -> None:
    marker = tmp_path / "executing"
    arguments = {"marker": str(marker), "seconds": 30}
    run, step = _journalled_intent("test.block", arguments)

    url, proc = killable_server()
    outcome: dict[str, Any] = {}

    def invoke() -> None:
        try:
            outcome["response"] = httpx.post(
                f"{url}/api/v1/tools/test.block/invoke",
                json={"arguments": arguments},
                headers={
                    "Authorization": f"Bearer {worker_token}",
                    "Idempotency-Key": step.idempotency_key,
                },
                timeout=60,
            )
        except httpx.TransportError as exc:
            outcome["error"] = exc

    caller = threading.Thread(target=invoke)
    caller.start()
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the tool never started"
        time.sleep(0.05)
    assert marker.read_text() == step.idempotency_key

    os.killpg(proc.pid, signal.SIGKILL)  # master and worker, mid-execution
    proc.wait(timeout=10)
    caller.join(timeout=30)
    assert "error" in outcome, outcome  # the caller never got an answer

    row = IdempotencyKey.objects.get(key=step.idempotency_key)
    assert (row.state, row.completed_at, row.response) == (KeyStatus.IN_PROGRESS, None, None)

    with override_settings(TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS=60):
        fake_clock.advance(seconds=45)  # the lease (30 s) expired; the lock (60 s) is not stale
        assert idempotency_state_for_recovery(step.idempotency_key).stale is False
        fake_clock.advance(seconds=30)  # now it is: the tool may or may not have acted
        assert runs_reap_expired_leases() == 1

    step.refresh_from_db()
    run.refresh_from_db()
    assert step.state == "unknown"
    assert run.status == "needs_review"
    event = Event.objects.filter(run=run, type="step_unknown").get()
    assert event.payload["key_state"] == "in_progress"
    assert event.payload["idempotency_key"] == step.idempotency_key
