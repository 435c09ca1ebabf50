"""Issue 40's trust holes, each reproduced from outside through the HTTP API.

1. a token scoped to another agent reads nothing of a run's steps, and a run it may not see
   answers exactly as a run that does not exist (the same 404, the same body);
2. completing (or failing) a run with a write step still open sends that step to review;
3. a finished run's keys do not execute at the gateway, with or without `Ledger-Epoch`, and
   cancel moves the epoch;
6. a free-form key of a `tools:direct` token is another token's only when it may see it.
"""

import io
import json
import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.canonical import arguments_hash, idempotency_key
from runs.constants import RunStatus, StatusReason, StepState
from runs.hotpath import HotPathWSGI
from runs.models import Event, Run, Step
from runs.services.actions import run_cancel
from runs.tokens import worker_token_create
from tools.models import IdempotencyKey, OutboundEmail, Ticket

pytestmark = pytest.mark.django_db

EMAIL = {
    "to": "alice@example.com",
    "subject": "Your refund",
    "body": "We sent the refund to IBAN DE89 3704 0044 0532 0130 00.",
}
STEP_1 = {
    "index": 1,
    "kind": "model",
    "name": "model.chat",
    "effect": "read",
    "arguments": {},
    "outcome": {"status": "ok", "result": {}},
}
TICKET = {"customer": "alice@example.com", "subject": "Refund", "body": "Alice's ticket."}


def client_for(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.default_format = "json"
    return client


def token(name: str, *, agents: tuple[str, ...] = (), direct: bool = False) -> APIClient:
    _, raw = worker_token_create(
        name=name, agents=agents, scopes=("tools:direct",) if direct else ()
    )
    return client_for(raw)


def leased_run(api: APIClient, agent: str = "support") -> tuple[str, int]:
    run_id = api.post("/api/v1/runs/", {"agent": agent, "input": {}}).json()["id"]
    epoch = api.post(f"/api/v1/runs/{run_id}/lease", {"worker": "w-1"}).json()["epoch"]
    return run_id, epoch


def write_intent(api: APIClient, run_id: str, epoch: int, index: int, **overrides: Any) -> Any:
    body = {
        "epoch": epoch,
        "index": index,
        "kind": "tool",
        "name": "email.send",
        "effect": "write",
        "enforced_by": "ledger",
        "arguments": EMAIL,
        **overrides,
    }
    response = api.post(f"/api/v1/runs/{run_id}/steps/", body)
    assert response.status_code == 201, response.content
    return response.json()


def invoke(api: APIClient, name: str, args: Any, key: str, **headers: str) -> Any:
    return api.post(
        f"/api/v1/tools/{name}/invoke",
        {"arguments": args},
        headers={"Idempotency-Key": key, **headers},
    )


# --- 1. a scoped token reads nothing of another agent's run ----------------------------------


def test_a_token_scoped_to_another_agent_cannot_read_a_step_or_learn_the_run_exists(
    api: APIClient,
) -> None:
    support = token("support-pods", agents=("support",))
    triage = token("triage-pods", agents=("triage",))
    run_id, epoch = leased_run(support, "support")
    write_intent(support, run_id, epoch, 0)
    nowhere = str(uuid.uuid4())

    for path in (
        "/api/v1/runs/{run}/steps/0/",
        "/api/v1/runs/{run}/steps/0/?wait=1",
        "/api/v1/runs/{run}/steps/7/",
        "/api/v1/runs/{run}/steps/7/?wait=1",
        "/api/v1/runs/{run}/steps/0/?wait=soon",
    ):
        theirs = triage.get(path.format(run=run_id))
        missing = triage.get(path.format(run=nowhere))
        assert theirs.status_code == missing.status_code == 404, (path, theirs.content)
        assert "IBAN" not in theirs.content.decode()
        # the same body as for a run that does not exist, the id aside
        assert theirs.content.decode().replace(run_id, "ID") == missing.content.decode().replace(
            nowhere, "ID"
        ), path
    # the run's own agent (and an unscoped token) still read the step
    assert support.get(f"/api/v1/runs/{run_id}/steps/0/").json()["arguments"] == EMAIL
    assert api.get(f"/api/v1/runs/{run_id}/steps/0/").status_code == 200


# --- 2. finishing a run accounts for its writes ---------------------------------------------


@pytest.mark.parametrize("finish", ["complete", "fail"])
def test_finishing_a_run_with_an_open_write_sends_the_write_to_review(
    api: APIClient, finish: str
) -> None:
    run_id, epoch = leased_run(api)
    write_intent(api, run_id, epoch, 0)  # the email step: journalled, never answered
    api.post(
        f"/api/v1/runs/{run_id}/steps/",
        {
            "epoch": epoch,
            "index": 1,
            "kind": "tool",
            "name": "kb.search",
            "effect": "read",
            "arguments": {"query": "refund"},
        },
    )  # a read left open too: harmless, it is only interrupted

    payload = {"output": {"ok": True}} if finish == "complete" else {"error": {"type": "Boom"}}
    response = api.post(f"/api/v1/runs/{run_id}/{finish}", {"epoch": epoch, **payload})

    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "needs_review"
    assert error["details"]["steps"] == [0]
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.status_reason) == (RunStatus.NEEDS_REVIEW, StatusReason.UNKNOWN_STEP)
    assert run.output is None
    steps = dict(Step.objects.filter(run_id=run_id).values_list("index", "state"))
    assert steps == {0: StepState.UNKNOWN, 1: StepState.INTERRUPTED}
    # the review queue has it, with why; the worker's word is kept in the chain
    review = Event.objects.get(run_id=run_id, type="needs_review")
    assert review.payload["steps"] == [0]
    assert review.payload["finish"] == finish
    unknown = Event.objects.get(run_id=run_id, type="step_unknown")
    assert unknown.payload["index"] == 0 and "still open" in unknown.payload["why"]
    # the worker asking again (its answer lost) hears the same, and nothing more is written
    again = api.post(f"/api/v1/runs/{run_id}/{finish}", {"epoch": epoch, **payload})
    assert (again.status_code, again.json()["error"]["code"]) == (409, "needs_review")
    assert Event.objects.filter(run_id=run_id, type="needs_review").count() == 1
    # and the key of the open write no longer executes
    before = OutboundEmail.objects.count()
    key = Step.objects.get(run_id=run_id, index=0).idempotency_key
    assert invoke(api, "email.send", EMAIL, key).status_code == 409
    assert OutboundEmail.objects.count() == before


def test_finishing_a_run_whose_writes_all_have_outcomes_completes_it(api: APIClient) -> None:
    run_id, epoch = leased_run(api)
    step = write_intent(api, run_id, epoch, 0)
    assert invoke(api, "email.send", EMAIL, step["idempotency_key"]).status_code == 200
    response = api.post(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": "sent"})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "completed"


# --- 3. a finished run's keys do not execute ------------------------------------------------


@pytest.mark.parametrize("with_epoch", [False, True])
@pytest.mark.parametrize("how", ["cancelled", "completed", "failed"])
def test_a_finished_runs_journalled_key_does_not_execute_at_the_gateway(
    api: APIClient, how: str, with_epoch: bool
) -> None:
    run_id, epoch = leased_run(api)
    step = write_intent(api, run_id, epoch, 0)
    if how == "cancelled":
        run_cancel(run_id=run_id, by="ada", note="customer withdrew")
    else:
        # a finished run: marked so in the database (what complete/fail leave when the open write
        # was answered; here the write stays open to see that its key cannot run afterwards)
        Run.objects.filter(pk=run_id).update(status=how)
    headers = {"Ledger-Epoch": str(epoch)} if with_epoch else {}

    response = invoke(api, "email.send", EMAIL, step["idempotency_key"], **headers)

    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "run_finished"
    assert response.json()["error"]["details"]["status"] == how
    assert OutboundEmail.objects.count() == 0
    assert not IdempotencyKey.objects.filter(key=step["idempotency_key"]).exists()


def test_cancel_moves_the_epoch_and_the_worker_still_learns_the_run_is_over(
    api: APIClient,
) -> None:
    run_id, epoch = leased_run(api)
    step = write_intent(api, run_id, epoch, 0)
    cancelled = run_cancel(run_id=run_id, by="ada", note="stop")
    assert cancelled.epoch == epoch + 1
    cancel_event = Event.objects.get(run_id=run_id, type="run_cancelled")
    assert cancel_event.payload["epoch"] == epoch + 1

    # the one-call path and the three-call path: refused as finished, nothing runs
    one_call = api.post(
        f"/api/v1/runs/{run_id}/steps/",
        {
            "epoch": epoch,
            "index": 0,
            "kind": "tool",
            "name": "email.send",
            "effect": "write",
            "arguments": EMAIL,
            "invoke": True,
        },
    )
    assert (one_call.status_code, one_call.json()["error"]["code"]) == (409, "run_finished")
    heartbeat = api.post(f"/api/v1/runs/{run_id}/heartbeat", {"epoch": epoch})
    assert (heartbeat.status_code, heartbeat.json()["error"]["code"]) == (409, "run_finished")
    done = api.post(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": None})
    assert (done.status_code, done.json()["error"]["code"]) == (409, "run_finished")
    assert OutboundEmail.objects.count() == 0
    # an outcome in flight when the run was cancelled is still recorded (the effect happened)
    outcome = api.post(
        f"/api/v1/runs/{run_id}/steps/0/outcome", {"epoch": epoch, "result": {"sent": 1}}
    )
    assert outcome.status_code == 200, outcome.content
    assert Step.objects.get(run_id=run_id, index=0).state == StepState.DONE
    assert step["epoch"] == epoch


# --- 6. free-form keys belong to the token that made them -----------------------------------


def test_a_direct_tokens_free_form_key_is_not_replayed_to_another_token(db: Any) -> None:
    alice = token("alice-desk", agents=("support",), direct=True)
    other = token("billing-desk", agents=("billing",), direct=True)
    assert invoke(alice, "tickets.create", TICKET, "alice-ticket-1").status_code == 200
    nobody_made = "nobody-made-this-key"

    replay = invoke(other, "tickets.create", TICKET, "alice-ticket-1")
    read = other.get("/api/v1/idempotency/alice-ticket-1")
    missing_read = other.get(f"/api/v1/idempotency/{nobody_made}")

    assert replay.status_code == 404, replay.content
    assert "alice@example.com" not in replay.content.decode()
    assert replay.json()["error"]["code"] == "not_found"
    assert (read.status_code, missing_read.status_code) == (404, 404)
    assert read.content.decode().replace("alice-ticket-1", "K") == (
        missing_read.content.decode().replace(nobody_made, "K")
    )
    assert Ticket.objects.count() == 1
    # its maker replays it, as does a token that may see the maker's agents
    assert invoke(alice, "tickets.create", TICKET, "alice-ticket-1").status_code == 200
    support_too = token("support-desk-2", agents=("support", "billing"), direct=True)
    assert invoke(support_too, "tickets.create", TICKET, "alice-ticket-1").status_code == 200
    assert alice.get("/api/v1/idempotency/alice-ticket-1").json()["state"] == "completed"
    assert Ticket.objects.count() == 1


def test_a_direct_token_cannot_plant_a_key_in_the_form_of_a_future_journal_step(
    api: APIClient,
) -> None:
    run_id, epoch = leased_run(api)
    future = idempotency_key(
        run_id=run_id, index=0, name="email.send", args_hash=arguments_hash(EMAIL)
    )
    planter = token("planter", agents=("billing",), direct=True)

    planted = invoke(planter, "email.send", EMAIL, future)

    assert planted.status_code == 409, planted.content
    assert planted.json()["error"]["code"] == "intent_not_journalled"
    assert not IdempotencyKey.objects.filter(key=future).exists()
    # the run's own step then runs under its key, once
    step = write_intent(api, run_id, epoch, 0)
    assert step["idempotency_key"] == future
    sent = invoke(api, "email.send", EMAIL, future)
    assert sent.status_code == 200 and "Idempotent-Replayed" not in sent.headers
    assert OutboundEmail.objects.count() == 1


@pytest.mark.django_db(transaction=True)  # the door closes its connection after each answer
def test_the_wsgi_door_answers_another_agents_run_as_a_run_that_does_not_exist(
    api: APIClient,
) -> None:
    """The lean calls are answered before Django (runs.hotpath.HotPathWSGI): same scopes."""
    _, raw = worker_token_create(name="triage-pods-2", agents=("triage",))
    run_id, epoch = leased_run(api)
    write_intent(api, run_id, epoch, 0)
    nowhere = str(uuid.uuid4())

    def declined(*_: Any) -> list[bytes]:
        raise AssertionError("a well-formed hot call must be answered by the door")

    door = HotPathWSGI(declined)
    bodies: dict[str, dict[str, Any]] = {
        "lease": {"worker": "thief"},
        "heartbeat": {"epoch": epoch},
        "steps/": {"epoch": epoch, **STEP_1},
        "steps/0/outcome": {"epoch": epoch, "result": {"sent": 1}},
        "complete": {"epoch": epoch, "output": {"done": 1}},
        "fail": {"epoch": epoch, "error": {"why": "stolen"}},
    }

    def knock(path: str, body: dict[str, Any]) -> tuple[str, str]:
        raw_body = json.dumps(body).encode()
        statuses: list[str] = []
        chunks = door(
            {
                "REQUEST_METHOD": "POST",
                "PATH_INFO": path,
                "CONTENT_TYPE": "application/json",
                "CONTENT_LENGTH": str(len(raw_body)),
                "HTTP_AUTHORIZATION": f"Bearer {raw}",
                "wsgi.input": io.BytesIO(raw_body),
            },
            lambda status, _headers, out=statuses: out.append(status),
        )
        return statuses[0], b"".join(chunks).decode()

    for path, body in bodies.items():
        answers = []
        for run in (run_id, nowhere):
            status, text = knock(f"/api/v1/runs/{run}/{path}", body)
            answers.append((status, text.replace(run, "ID")))
        assert answers[0] == answers[1], path
        assert answers[0][0] == "404 Not Found", (path, answers[0])
    assert Step.objects.filter(run_id=run_id).count() == 1
    assert Run.objects.get(pk=run_id).epoch == epoch
    assert Run.objects.get(pk=run_id).status == "running"

    # and it creates runs for its own agents only
    status, text = knock("/api/v1/runs/", {"agent": "support", "external_id": "by-triage"})
    assert status == "403 Forbidden" and json.loads(text)["error"]["code"] == "agent_not_allowed"
    assert not Run.objects.filter(external_id="by-triage").exists()
    status, _ = knock("/api/v1/runs/", {"agent": "triage", "external_id": "by-triage"})
    assert status == "201 Created"
