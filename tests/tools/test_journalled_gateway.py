"""Side effects cannot skip the journal: a write's key must name a journalled intent, the gateway
records the outcome with the key, a gateway step takes one call, and every refusal writes nothing.
"""

from typing import Any

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from runs.canonical import arguments_hash
from runs.models import Event, Run, Step
from runs.tokens import worker_token_create
from tests.conftest import FakeClock, chain_problems
from tools.idempotency import idempotency_keys_prune
from tools.models import IdempotencyKey, OutboundEmail, Ticket

pytestmark = pytest.mark.django_db

TICKET = {"customer": "ada@example.com", "subject": "Charged twice", "body": "Two charges."}
EMAIL = {"to": "ada@example.com", "subject": "Refund", "body": "We refunded the duplicate."}


def client_for(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.default_format = "json"
    return client


def written() -> dict[str, int]:
    """Everything a refusal must leave as it was."""
    return {
        "events": Event.objects.count(),
        "steps": Step.objects.count(),
        "step_states": hash(tuple(Step.objects.order_by("pk").values_list("state", flat=True))),
        "keys": IdempotencyKey.objects.count(),
        "tickets": Ticket.objects.count(),
        "emails": OutboundEmail.objects.count(),
    }


def leased_run(api: APIClient, agent: str = "support") -> tuple[str, int]:
    run_id = api.post("/api/v1/runs/", {"agent": agent, "input": {}}).json()["id"]
    epoch = api.post(f"/api/v1/runs/{run_id}/lease", {"worker": "w-1"}).json()["epoch"]
    return run_id, epoch


def intent(api: APIClient, run_id: str, epoch: int, index: int, name: str, args: Any) -> Any:
    response = api.post(
        f"/api/v1/runs/{run_id}/steps/",
        {
            "epoch": epoch,
            "index": index,
            "kind": "tool",
            "name": name,
            "effect": "write",
            "enforced_by": "ledger",
            "arguments": args,
        },
    )
    assert response.status_code == 201, response.content
    return response.json()


def invoke(api: APIClient, name: str, args: Any, key: str | None, **headers: str) -> Any:
    if key is not None:
        headers["Idempotency-Key"] = key
    return api.post(f"/api/v1/tools/{name}/invoke", {"arguments": args}, headers=headers)


def one_call(api: APIClient, run_id: str, epoch: int, index: int, name: str, args: Any) -> Any:
    return api.post(
        f"/api/v1/runs/{run_id}/steps/",
        {
            "epoch": epoch,
            "index": index,
            "kind": "tool",
            "name": name,
            "effect": "read" if name.endswith("search") else "write",
            "arguments": args,
            "invoke": True,
        },
    )


def refused(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


# --- 1. the gateway refuses a write whose intent is not journalled --------------------------


def test_a_made_up_key_is_refused_409_intent_not_journalled_and_nothing_runs(
    api: APIClient,
) -> None:
    run_id, _ = leased_run(api)
    before = written()
    made_up = f"{run_id}:0:tickets.create:{'0' * 32}"
    for key in (made_up, "my-own-key-1"):
        error = refused(invoke(api, "tickets.create", TICKET, key), 409, "intent_not_journalled")
        assert error["details"] == {"key": key, "found": None}
    assert written() == before


def test_a_key_with_other_arguments_or_another_tool_is_409_not_422_and_the_key_stays_unused(
    api: APIClient,
) -> None:
    run_id, epoch = leased_run(api)
    step = intent(api, run_id, epoch, 0, "tickets.create", TICKET)
    before = written()

    other_args = invoke(
        api, "tickets.create", {**TICKET, "subject": "Else"}, step["idempotency_key"]
    )
    error = refused(other_args, 409, "intent_not_journalled")
    assert error["details"]["found"] == {
        "run": run_id,
        "index": 0,
        "name": "tickets.create",
        "arguments_hash": arguments_hash(TICKET),
        "state": "intent",
    }
    assert error["details"]["given"]["arguments_hash"] == arguments_hash(
        {**TICKET, "subject": "Else"}
    )
    other_tool = invoke(api, "email.send", EMAIL, step["idempotency_key"])
    assert refused(other_tool, 409, "intent_not_journalled")["details"]["given"]["name"] == (
        "email.send"
    )
    assert written() == before

    # the key was never consumed: the journalled call runs under it
    assert invoke(api, "tickets.create", TICKET, step["idempotency_key"]).status_code == 200


def test_a_stale_ledger_epoch_is_refused_409_and_nothing_runs(api: APIClient) -> None:
    run_id, epoch = leased_run(api)
    step = intent(api, run_id, epoch, 0, "tickets.create", TICKET)
    before = written()
    stale = invoke(api, "tickets.create", TICKET, step["idempotency_key"], **{"Ledger-Epoch": "0"})
    assert refused(stale, 409, "stale_epoch")["details"] == {"epoch": 0, "current_epoch": epoch}
    garbage = invoke(
        api, "tickets.create", TICKET, step["idempotency_key"], **{"Ledger-Epoch": "x"}
    )
    refused(garbage, 400, "validation_error")
    assert written() == before
    current = invoke(
        api, "tickets.create", TICKET, step["idempotency_key"], **{"Ledger-Epoch": str(epoch)}
    )
    assert current.status_code == 200


def test_an_unknown_tool_is_404_and_nothing_is_journalled(api: APIClient) -> None:
    run_id, epoch = leased_run(api)
    before = written()
    refused(invoke(api, "no.such.tool", {}, "k"), 404, "tool_not_found")
    refused(one_call(api, run_id, epoch, 0, "no.such.tool", {}), 404, "tool_not_found")
    assert written() == before


def test_a_direct_token_may_use_free_form_keys_a_default_token_may_not(api: APIClient) -> None:
    _, raw = worker_token_create(name="billing-service", scopes=("tools:direct",))
    direct = client_for(raw)
    assert invoke(direct, "tickets.create", TICKET, "billing-2026-11-30-1").status_code == 200
    assert Ticket.objects.get().created_by_key == "billing-2026-11-30-1"
    before = written()
    refused(
        invoke(api, "tickets.create", TICKET, "billing-2026-11-30-2"), 409, "intent_not_journalled"
    )
    assert written() == before


# --- 2. the gateway records the outcome ----------------------------------------------------


def test_completing_a_step_key_records_the_step_done_and_a_same_outcome_call_still_answers_200(
    api: APIClient,
) -> None:
    run_id, epoch = leased_run(api)
    step = intent(api, run_id, epoch, 0, "tickets.create", TICKET)
    created = invoke(api, "tickets.create", TICKET, step["idempotency_key"])
    assert created.status_code == 200
    result = created.json()["result"]

    row = Step.objects.get(run_id=run_id, index=0)
    assert (row.state, row.result) == ("done", result)
    done = Event.objects.get(run_id=run_id, type="step_done")
    assert done.payload["index"] == 0 and done.actor == "worker:test-worker"

    # an SDK from before this change still sends the outcome: the same result answers 200
    outcome = api.post(
        f"/api/v1/runs/{run_id}/steps/0/outcome",
        {"epoch": epoch, "status": "ok", "result": result},
    )
    assert outcome.status_code == 200, outcome.content
    assert Event.objects.filter(run_id=run_id, type="step_done").count() == 1
    assert chain_problems(run_id) == []


def test_a_tool_failure_records_the_step_error_with_the_stored_failure(api: APIClient) -> None:
    run_id, epoch = leased_run(api)
    args = {"ticket_id": 999_999, "body": "hello"}
    step = intent(api, run_id, epoch, 0, "tickets.comment", args)
    failed = invoke(api, "tickets.comment", args, step["idempotency_key"])
    assert failed.status_code == 404
    row = Step.objects.get(run_id=run_id, index=0)
    assert (row.state, row.result) == ("error", failed.json())
    assert Event.objects.filter(run_id=run_id, type="step_error").count() == 1
    again = invoke(api, "tickets.comment", args, step["idempotency_key"])
    assert again.headers["Idempotent-Replayed"] == "true" and again.json() == failed.json()
    assert chain_problems(run_id) == []


def test_a_done_step_key_reused_after_the_prune_replays_the_recorded_result(
    api: APIClient, fake_clock: FakeClock
) -> None:
    run_id, epoch = leased_run(api)
    step = intent(api, run_id, epoch, 0, "tickets.create", TICKET)
    first = invoke(api, "tickets.create", TICKET, step["idempotency_key"])
    fake_clock.advance(hours=73)
    with override_settings(TOOLS_IDEMPOTENCY_RETENTION_HOURS=72):
        assert idempotency_keys_prune() == 1
    assert not IdempotencyKey.objects.exists()

    again = invoke(api, "tickets.create", TICKET, step["idempotency_key"])
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Ticket.objects.count() == 1 and not IdempotencyKey.objects.exists()


def test_a_tools_exception_text_stays_in_the_log_and_the_key_record(
    api: APIClient, test_tools: None, caplog: pytest.LogCaptureFixture
) -> None:
    run_id, epoch = leased_run(api)
    args = {"customer": "bob@example.com"}
    step = intent(api, run_id, epoch, 0, "test.explode", args)
    failed = invoke(api, "test.explode", args, step["idempotency_key"])
    error = refused(failed, 502, "tool_failed")
    reference = error["details"]["reference"]
    assert "relay" not in failed.content.decode()
    assert error["details"] == {"exception": "RuntimeError", "reference": reference}
    logged = [r for r in caplog.records if reference in r.getMessage()]
    assert logged and "relay fell over" in str(logged[0].exc_info[1] if logged[0].exc_info else "")
    key = IdempotencyKey.objects.get(key=step["idempotency_key"])
    assert key.internal_error.startswith("RuntimeError: the upstream relay")
    assert Step.objects.get(run_id=run_id, index=0).result == failed.json()


# --- 3. one call for a gateway step ---------------------------------------------------------


def test_a_gateway_write_step_in_one_call_answers_201_done_and_a_replay_200(
    api: APIClient, mailoutbox: list[Any]
) -> None:
    run_id, epoch = leased_run(api)
    sent = one_call(api, run_id, epoch, 0, "email.send", EMAIL)
    assert sent.status_code == 201, sent.content
    step = sent.json()
    assert (step["state"], step["enforced_by"], step["effect"]) == ("done", "ledger", "write")
    assert step["result"]["email"]["message_id"]
    again = one_call(api, run_id, epoch, 0, "email.send", EMAIL)
    assert again.status_code == 200 and again.json() == step
    assert OutboundEmail.objects.count() == 1 and len(mailoutbox) == 1
    types = list(Event.objects.filter(run_id=run_id).values_list("type", flat=True))
    assert types[-2:] == ["step_intent", "step_done"]
    assert IdempotencyKey.objects.get().key == step["idempotency_key"]
    assert chain_problems(run_id) == []


def test_a_gateway_step_whose_tool_refuses_is_201_error_with_the_stored_failure(
    api: APIClient,
) -> None:
    run_id, epoch = leased_run(api)
    answer = one_call(
        api, run_id, epoch, 0, "tickets.close", {"ticket_id": 4242, "resolution": "x"}
    )
    assert answer.status_code == 201
    step = answer.json()
    assert step["state"] == "error"
    assert step["result"]["error"]["code"] == "ticket_not_found"
    assert chain_problems(run_id) == []


def test_a_read_gateway_step_is_journalled_with_its_result_in_one_call(api: APIClient) -> None:
    run_id, epoch = leased_run(api)
    answer = one_call(api, run_id, epoch, 0, "kb.search", {"query": "refund"})
    assert answer.status_code == 201, answer.content
    assert answer.json()["state"] == "done" and "articles" in answer.json()["result"]
    assert chain_problems(run_id) == []


def test_a_one_call_step_with_the_wrong_effect_or_an_outcome_is_400_and_writes_nothing(
    api: APIClient,
) -> None:
    run_id, epoch = leased_run(api)
    before = written()
    body = {
        "epoch": epoch,
        "index": 0,
        "kind": "tool",
        "name": "email.send",
        "effect": "read",
        "arguments": EMAIL,
        "invoke": True,
    }
    refused(api.post(f"/api/v1/runs/{run_id}/steps/", body), 400, "validation_error")
    with_outcome = {**body, "effect": "write", "outcome": {"status": "ok", "result": {}}}
    refused(api.post(f"/api/v1/runs/{run_id}/steps/", with_outcome), 400, "validation_error")
    bad_args = {**body, "effect": "write", "arguments": {"to": "not-an-email"}}
    refused(api.post(f"/api/v1/runs/{run_id}/steps/", bad_args), 400, "validation_error")
    assert written() == before


# --- 5. scoped tokens -------------------------------------------------------------------------


def test_two_tokens_scoped_to_different_agents_cannot_touch_each_others_runs_or_keys(
    db: Any,
) -> None:
    _, support_raw = worker_token_create(name="support-pods", agents=["support"])
    _, triage_raw = worker_token_create(name="triage-pods", agents=["triage"])
    support, triage = client_for(support_raw), client_for(triage_raw)
    support_run, support_epoch = leased_run(support, "support")
    triage_run, triage_epoch = leased_run(triage, "triage")
    support_step = intent(support, support_run, support_epoch, 0, "tickets.create", TICKET)
    triage_step = intent(triage, triage_run, triage_epoch, 0, "tickets.create", TICKET)
    assert (
        invoke(support, "tickets.create", TICKET, support_step["idempotency_key"]).status_code
        == 200
    )
    before = written()
    runs_before = list(Run.objects.order_by("pk").values_list("status", "epoch", "event_seq"))

    for me, other_run, other_epoch, other_key in (
        (support, triage_run, triage_epoch, triage_step["idempotency_key"]),
        (triage, support_run, support_epoch, support_step["idempotency_key"]),
    ):
        refused(me.get(f"/api/v1/runs/{other_run}/"), 404, "not_found")
        refused(me.get(f"/api/v1/runs/{other_run}/journal"), 404, "not_found")
        refused(me.post(f"/api/v1/runs/{other_run}/lease", {"worker": "thief"}), 404, "not_found")
        refused(
            me.post(f"/api/v1/runs/{other_run}/heartbeat", {"epoch": other_epoch}), 404, "not_found"
        )
        refused(
            me.post(f"/api/v1/runs/{other_run}/fail", {"epoch": other_epoch, "error": "x"}),
            404,
            "not_found",
        )
        refused(
            me.post(
                f"/api/v1/runs/{other_run}/steps/0/outcome",
                {"epoch": other_epoch, "status": "ok", "result": {}},
            ),
            404,
            "not_found",
        )
        # neither the stored response (replay) nor the key's state is readable
        refused(invoke(me, "tickets.create", TICKET, other_key), 404, "not_found")
        refused(me.get(f"/api/v1/idempotency/{other_key}"), 404, "not_found")
    refused(
        support.post("/api/v1/runs/", {"agent": "triage", "input": {}}), 403, "agent_not_allowed"
    )
    assert written() == before
    assert (
        list(Run.objects.order_by("pk").values_list("status", "epoch", "event_seq")) == runs_before
    )


def test_an_unscoped_token_keeps_access_to_every_agent(api: APIClient) -> None:
    _, raw = worker_token_create(name="support-only", agents=["support"])
    run_id, _ = leased_run(client_for(raw), "support")
    assert api.get(f"/api/v1/runs/{run_id}/").status_code == 200


def test_create_worker_token_takes_agents_and_the_direct_scope(db: Any) -> None:
    from io import StringIO

    from django.core.management import call_command

    from runs.models import WorkerToken

    out, err = StringIO(), StringIO()
    call_command(
        "create_worker_token",
        "pods",
        "--agent",
        "support",
        "--agent",
        "triage",
        "--scope",
        "tools:direct",
        stdout=out,
        stderr=err,
    )
    token = WorkerToken.objects.get(name="pods")
    assert token.agents == ["support", "triage"]
    assert token.scopes == {"worker", "tools:direct"}
    assert out.getvalue().strip().startswith("alw_")
