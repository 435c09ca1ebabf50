"""The gateway's contract: execute once, replay, and the three refusals that change nothing."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.canonical import arguments_hash
from tools.idempotency import idempotency_reserve
from tools.models import IdempotencyKey, KeyStatus, Ticket

pytestmark = pytest.mark.django_db

TICKET = {"customer": "ada@example.com", "subject": "Charged twice", "body": "Two charges."}


def test_first_invoke_executes_and_the_same_request_again_gets_the_stored_response(
    invoke: Any,
) -> None:
    first = invoke("tickets.create", TICKET, key="run-1:0:tickets.create:abc")
    assert first.status_code == 200, first.content
    assert "Idempotent-Replayed" not in first.headers
    ticket = first.json()["result"]["ticket"]
    assert ticket["status"] == "open" and ticket["customer"] == "ada@example.com"

    again = invoke("tickets.create", TICKET, key="run-1:0:tickets.create:abc")
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Ticket.objects.count() == 1
    assert Ticket.objects.get().created_by_key == "run-1:0:tickets.create:abc"
    row = IdempotencyKey.objects.get()
    assert (row.state, row.tool, row.request_hash) == (
        KeyStatus.COMPLETED,
        "tickets.create",
        arguments_hash(TICKET),
    )
    assert row.replay_count == 1  # the duplicate it prevented, shown in the run's transcript


def test_write_tool_without_key_is_refused_400_and_changes_nothing(invoke: Any) -> None:
    response = invoke("tickets.create", TICKET)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "idempotency_key_required"
    assert Ticket.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


def test_same_key_with_other_arguments_is_refused_422_and_changes_nothing(invoke: Any) -> None:
    first = invoke("tickets.create", TICKET, key="k-reused")
    assert first.status_code == 200
    stored = IdempotencyKey.objects.values().get()

    other = invoke("tickets.create", {**TICKET, "subject": "Something else"}, key="k-reused")
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    # the same key for another tool is the same refusal
    comment = invoke("tickets.comment", {"ticket_id": 1, "body": "x"}, key="k-reused")
    assert comment.status_code == 422
    assert comment.json()["error"]["code"] == "idempotency_key_reused"

    assert Ticket.objects.count() == 1
    assert IdempotencyKey.objects.values().get() == stored


def test_same_key_while_the_first_still_executes_is_refused_409_and_changes_nothing(
    invoke: Any,
) -> None:
    held = idempotency_reserve(
        key="k-busy", tool="tickets.create", request_hash=arguments_hash(TICKET)
    )
    assert not hasattr(held, "replayed")  # a Reservation: this "request" is executing
    before = IdempotencyKey.objects.values().get()

    response = invoke("tickets.create", TICKET, key="k-busy")
    assert response.status_code == 409
    body = response.json()["error"]
    assert body["code"] == "idempotency_in_progress"
    assert body["details"]["stale"] is False
    assert response.headers["Retry-After"] == "1"
    assert Ticket.objects.count() == 0
    assert IdempotencyKey.objects.values().get() == before


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"customer": "not-an-email", "subject": "s", "body": "b"}, "customer"),
        ({"customer": "ada@example.com", "body": "b"}, "subject"),
        ({**TICKET, "priority": "urgent"}, "priority"),
        ({**TICKET, "subject": "x" * 201}, "subject"),
    ],
)
def test_bad_arguments_are_refused_400_with_field_details_and_consume_no_key(
    invoke: Any, arguments: dict[str, Any], field: str
) -> None:
    response = invoke("tickets.create", arguments, key="k-valid-later")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["details"]["arguments"]
    assert IdempotencyKey.objects.count() == 0
    assert Ticket.objects.count() == 0
    # the key was not consumed: the corrected request executes under it
    assert invoke("tickets.create", TICKET, key="k-valid-later").status_code == 200


def test_malformed_bodies_and_keys_are_400_not_500(invoke: Any, api: APIClient) -> None:
    assert invoke("tickets.create", ["not", "an", "object"], key="k1").status_code == 400
    extra = invoke("tickets.create", TICKET, key="k1", surprise=True)
    assert extra.status_code == 400
    assert "surprise" in extra.json()["error"]["details"]
    spaced = invoke("tickets.create", TICKET, key="has spaces")
    assert spaced.status_code == 400
    assert invoke("tickets.create", TICKET, key="k" * 401).status_code == 400
    raw = api.post(
        "/api/v1/tools/tickets.create/invoke",
        data=b"[1,2]",
        content_type="application/json",
        headers={"Idempotency-Key": "k2"},
    )
    assert raw.status_code == 400
    assert IdempotencyKey.objects.count() == 0


def test_unknown_tool_is_404(invoke: Any) -> None:
    response = invoke("tickets.delete_all", {}, key="k")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "tool_not_found"


def test_the_gateway_needs_a_worker_token(db: Any) -> None:
    anonymous = APIClient()
    assert anonymous.get("/api/v1/tools/").status_code == 401
    response = anonymous.post(
        "/api/v1/tools/tickets.create/invoke",
        {"arguments": TICKET},
        format="json",
        headers={"Idempotency-Key": "k"},
    )
    assert response.status_code == 401
    assert Ticket.objects.count() == 0
    assert anonymous.get("/api/v1/idempotency/k").status_code == 401


def test_tool_list_names_every_tool_with_its_effect(api: APIClient) -> None:
    body = api.get("/api/v1/tools/").json()
    effects = {t["name"]: t["effect"] for t in body["tools"]}
    assert effects == {
        "bench.noop": "write",
        "email.send": "write",
        "kb.search": "read",
        "tickets.close": "write",
        "tickets.comment": "write",
        "tickets.create": "write",
        "tickets.search": "read",
    }
    create = next(t for t in body["tools"] if t["name"] == "tickets.create")
    assert create["arguments"]["customer"] == {"type": "email", "required": True}
    assert create["arguments"]["subject"] == {"type": "string", "required": True, "max_length": 200}
    search = next(t for t in body["tools"] if t["name"] == "tickets.search")
    assert search["arguments"]["status"]["choices"] == ["open", "closed"]
    assert search["arguments"]["limit"]["default"] == 20


def test_a_read_tool_needs_no_key_and_records_none(invoke: Any) -> None:
    response = invoke("tickets.search", {"status": "open"})
    assert response.status_code == 200
    assert response.json() == {"result": {"tickets": []}}
    assert IdempotencyKey.objects.count() == 0


def test_key_state_endpoint_reports_absent_in_progress_completed_failed(
    api: APIClient, invoke: Any
) -> None:
    assert api.get("/api/v1/idempotency/run:0:x:abc").json() == {
        "key": "run:0:x:abc",
        "state": "absent",
    }
    idempotency_reserve(key="busy/with:slash", tool="bench.noop", request_hash="0" * 64)
    busy = api.get("/api/v1/idempotency/busy/with:slash").json()
    assert (busy["state"], busy["stale"], "response" in busy) == ("in_progress", False, False)

    done = invoke("tickets.create", TICKET, key="k-done").json()
    completed = api.get("/api/v1/idempotency/k-done").json()
    assert (completed["state"], completed["response"]) == ("completed", done)

    invoke("tickets.comment", {"ticket_id": 999999, "body": "hi"}, key="k-failed")
    failed = api.get("/api/v1/idempotency/k-failed").json()
    assert failed["state"] == "failed"
    assert failed["status_code"] == 404
    assert failed["response"]["error"]["code"] == "ticket_not_found"


def test_key_state_of_a_malformed_key_is_400(api: APIClient) -> None:
    response = api.get("/api/v1/idempotency/has%20space")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert api.get("/api/v1/idempotency/nul%00byte").status_code == 400
