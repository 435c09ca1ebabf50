"""The one-call gateway step killed at each point, over real HTTP, real SMTP and a real SIGKILL.

A web server started with GATEWAY_CRASH_AT=<point> dies (the whole process group) inside
`POST /runs/{id}/steps/` with `"invoke": true` for `email.send`. A second web server takes over;
once the lease and the key's lock (2 s) have run out, a new lease applies the recovery rules and
the step ends where they say, with never more than one email row and one SMTP message (the four
servers die first and their leases run out together: one 5 s wait, not four; each point is a
subtest of its own):

| killed                       | recovery finds                     | then                          |
|------------------------------|------------------------------------|-------------------------------|
| before the intent commits    | no step                            | the step runs once            |
| after the intent commits     | an intent, no key: `interrupted`   | re-executed under its key     |
| inside the tool (key held)   | a stale key: `unknown`, review     | a supervisor's retry runs it  |
| after the tool, before commit| a stale key: `unknown`, review     | the supervisor says sent      |
"""

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from runs.models import Run, Step
from runs.services.decisions import step_resolve
from tests.conftest import chain_problems
from tests.processes import start_web_server, stop_process
from tests.tools.conftest import SmtpRecorder, server_env_for
from tools.models import OutboundEmail

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LEASE_TTL = 5
LOCK_TIMEOUT = "2"


class Worker:
    """The test plays the worker, over HTTP, against whichever server is up."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return self.http.request(method, path, json=body)

    def lease(self, run_id: str, worker: str) -> httpx.Response:
        return self.call(
            "POST", f"/api/v1/runs/{run_id}/lease", {"worker": worker, "ttl_seconds": LEASE_TTL}
        )

    def email_step(self, run_id: str, epoch: int, to: str) -> httpx.Response:
        return self.call(
            "POST",
            f"/api/v1/runs/{run_id}/steps/",
            {
                "epoch": epoch,
                "index": 0,
                "kind": "tool",
                "name": "email.send",
                "effect": "write",
                "arguments": {"to": to, "subject": "Refund", "body": "Refunded."},
                "invoke": True,
            },
        )


@pytest.fixture(scope="module")
def takeover_server(django_db_setup: Any, smtp_server: SmtpRecorder) -> Iterator[str]:
    """The web server that takes over after each kill (no crash point; the same short lock
    timeout), one for the module: it keeps no state of a run between requests."""
    url, proc = start_web_server(
        env={
            **server_env_for(smtp_server.port),
            "TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS": LOCK_TIMEOUT,
        },
        workers=1,
        threads=2,
        log_name="tools-web-takeover",
        ready_path="/api/v1/tools/",
    )
    try:
        yield url
    finally:
        stop_process(proc)


def smtp_to(smtp: SmtpRecorder, to: str) -> int:
    return sum(1 for message in list(smtp.messages) if message["To"] == to)


def effects(smtp: SmtpRecorder, to: str) -> tuple[int, int]:
    return OutboundEmail.objects.filter(to=to).count(), smtp_to(smtp, to)


POINTS = ["before_intent", "after_intent", "inside_tool", "before_outcome_commit"]


@dataclass
class Crashed:
    """A step whose server died under it, waiting for its lease to run out."""

    run_id: str
    to: str
    lease_ends: float  # time.monotonic() after which the takeover may lease


def crash_at(point: str, killable_server: Callable[..., tuple[str, Any]], token: str) -> Crashed:
    to = f"crash-{point.replace('_', '-')}@example.com"
    url, proc = killable_server(
        GATEWAY_CRASH_AT=point, TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS=LOCK_TIMEOUT
    )
    first = Worker(url, token)
    run_id = first.call("POST", "/api/v1/runs/", {"agent": "mailer", "input": {}}).json()["id"]
    leased_before = time.monotonic()
    epoch = first.lease(run_id, "pod-1").json()["epoch"]
    with pytest.raises(httpx.TransportError):
        first.email_step(run_id, epoch, to)  # the server dies under the call
    proc.wait(timeout=10)
    # and at least 0.5 s after the kill, so that an SMTP conversation that finished just before
    # it has been recorded
    lease_ends = max(leased_before + LEASE_TTL + 0.5, time.monotonic() + 0.5)
    return Crashed(run_id=run_id, to=to, lease_ends=lease_ends)


def test_a_one_call_gateway_step_killed_at_each_point_makes_no_duplicate_effect(
    killable_server: Callable[..., tuple[str, Any]],
    takeover_server: str,
    smtp_server: SmtpRecorder,
    worker_token: str,
    subtests: pytest.Subtests,
) -> None:
    # every point's server is killed first, so that their leases (5 s at least) run out together
    crashed = {point: crash_at(point, killable_server, worker_token) for point in POINTS}
    second = Worker(takeover_server, worker_token)
    for point, step_killed in crashed.items():
        with subtests.test(point=point):
            time.sleep(max(0.0, step_killed.lease_ends - time.monotonic()))
            takeover_finds_what_the_rules_say(point, step_killed, second, smtp_server)


def takeover_finds_what_the_rules_say(
    point: str, crashed: Crashed, second: Worker, smtp_server: SmtpRecorder
) -> None:
    run_id, to = crashed.run_id, crashed.to
    # the lease (and the key's lock, which is shorter) ran out
    lease = second.lease(run_id, "pod-2")
    step = Step.objects.filter(run_id=run_id, index=0).first()

    if point == "before_intent":
        assert step is None and lease.status_code == 200
        assert effects(smtp_server, to) == (0, 0)
    elif point == "after_intent":
        assert step is not None and (step.state, lease.status_code) == ("interrupted", 200)
        assert effects(smtp_server, to) == (0, 0)
    else:
        # the key is held by an execution that died: nobody can know whether it acted
        assert step is not None and step.state == "unknown"
        assert lease.status_code == 409 and lease.json()["error"]["code"] == "needs_review"
        sent_before = 1 if point == "before_outcome_commit" else 0
        assert effects(smtp_server, to) == (0, sent_before)  # the row rolled back with the key
        action = "sent" if sent_before else "retry"
        step_resolve(
            run_id=run_id, index=0, action=action, note=f"checked the mail log: {action}", by="sup"
        )
        lease = second.lease(run_id, "pod-2")
        assert lease.status_code == 200, lease.text

    again = second.email_step(run_id, lease.json()["epoch"], to)
    assert again.status_code in (200, 201), again.text
    assert again.json()["state"] == "done"
    step = Step.objects.get(run_id=run_id, index=0)
    assert step.state == "done"
    rows, messages = effects(smtp_server, to)
    assert messages == 1, f"{messages} SMTP messages to {to}"
    assert rows == (0 if point == "before_outcome_commit" else 1)
    assert Run.objects.get(pk=run_id).step_count == 1
    assert chain_problems(run_id) == []
