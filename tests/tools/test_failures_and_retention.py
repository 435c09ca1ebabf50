"""Failures are stored and replayed; write tools cannot run outside enforcement; keys expire."""

from typing import Any

import pytest
from django.test import override_settings
from rest_framework import serializers

from runs.canonical import arguments_hash
from runs.constants import Effect
from tests.conftest import FakeClock
from tests.tools import fixture_tools
from tools.idempotency import (
    Outcome,
    idempotency_keys_prune,
    idempotency_reserve,
    idempotent,
)
from tools.models import IdempotencyKey, KeyStatus, Ticket
from tools.registry import StrictArguments, ToolContext, tool_get, tool_register, tool_unregister
from tools.selectors import key_state_for_recovery as idempotency_state_for_recovery

pytestmark = pytest.mark.django_db


def test_a_tool_raising_mid_execution_ends_failed_and_the_retry_gets_the_stored_failure(
    invoke: Any, test_tools: None
) -> None:
    first = invoke("test.explode", {"customer": "bob@example.com"}, key="k-explode")
    assert first.status_code == 502
    error = first.json()["error"]
    assert error["code"] == "tool_failed"
    # the tool's own text stays in the log and the key's record: callers get type and reference
    assert "relay fell over" not in first.content.decode()
    assert error["details"]["exception"] == "RuntimeError"
    assert error["details"]["reference"] in error["message"]
    # the row the tool wrote before raising was rolled back with its transaction
    assert Ticket.objects.count() == 0
    row = IdempotencyKey.objects.get(key="k-explode")
    assert (row.state, row.status_code, row.response) == (KeyStatus.FAILED, 502, first.json())
    assert row.internal_error == "RuntimeError: the upstream relay fell over mid-request"

    retry = invoke("test.explode", {"customer": "bob@example.com"}, key="k-explode")
    assert retry.status_code == 502
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json() == first.json()
    assert fixture_tools.CALLS["test.explode"] == 1  # never executed a second time
    assert idempotency_state_for_recovery("k-explode").state == "failed"


def test_a_tool_refusal_is_stored_too(invoke: Any) -> None:
    missing = invoke("tickets.comment", {"ticket_id": 424242, "body": "hello"}, key="k-c")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "ticket_not_found"
    Ticket.objects.create(id=424242, customer="a@example.com", subject="s", body="b")
    again = invoke("tickets.comment", {"ticket_id": 424242, "body": "hello"}, key="k-c")
    assert again.status_code == 404
    assert again.headers["Idempotent-Replayed"] == "true"


def test_a_write_tool_called_directly_outside_enforcement_refuses_to_run(db: Any) -> None:
    create = tool_get(name="tickets.create")
    context = ToolContext(tool="tickets.create", idempotency_key="k-direct", actor="test")
    with pytest.raises(RuntimeError, match="outside idempotency enforcement"):
        create.fn({"customer": "a@example.com", "subject": "s", "body": "b"}, context)
    assert Ticket.objects.count() == 0


def test_registering_a_write_tool_always_wraps_it_and_schemas_must_be_strict() -> None:
    class Loose(serializers.Serializer):
        x = serializers.IntegerField()

    with pytest.raises(TypeError):
        tool_register(name="t.loose", effect=Effect.WRITE, arguments=Loose, fn=lambda a, c: a)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="effect"):
        tool_register(name="t.x", effect="maybe", arguments=StrictArguments, fn=lambda a, c: a)
    with pytest.raises(ValueError, match="already registered"):
        tool_register(
            name="email.send", effect=Effect.READ, arguments=StrictArguments, fn=lambda a, c: a
        )

    def raw(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        return {}

    registered = tool_register(
        name="t.wrapped", effect=Effect.WRITE, arguments=StrictArguments, fn=raw
    )
    try:
        assert registered.fn is not raw
    finally:
        tool_unregister(name="t.wrapped")


def test_an_in_progress_key_turns_stale_after_the_lock_timeout(fake_clock: FakeClock) -> None:
    idempotency_reserve(key="k-lock", tool="bench.noop", request_hash="0" * 64)
    with override_settings(TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS=60):
        fake_clock.advance(seconds=59)
        assert idempotency_state_for_recovery("k-lock").stale is False
        fake_clock.advance(seconds=1)
        state = idempotency_state_for_recovery("k-lock")
        assert (state.state, state.stale) == ("in_progress", True)


def test_a_stale_key_is_still_refused_409_unless_a_supervisor_said_retry(
    fake_clock: FakeClock, invoke: Any
) -> None:
    arguments = {"customer": "c@example.com", "subject": "s", "body": "b"}
    idempotency_reserve(
        key="k-stale", tool="tickets.create", request_hash=arguments_hash(arguments)
    )
    fake_clock.advance(hours=1)
    response = invoke("tickets.create", arguments, key="k-stale")
    assert response.status_code == 409
    assert response.json()["error"]["details"]["stale"] is True
    assert Ticket.objects.count() == 0


def test_pruning_keeps_72_hours_and_never_touches_in_progress(fake_clock: FakeClock) -> None:
    outcome = noop_helper(idempotency_key="k-old-done", payload=1)
    assert outcome.status_code == 200
    idempotency_reserve(key="k-old-busy", tool="bench.noop", request_hash="0" * 64)
    with override_settings(TOOLS_IDEMPOTENCY_RETENTION_HOURS=1):  # never below 72 h
        fake_clock.advance(hours=71)
        assert idempotency_keys_prune() == 0
        fake_clock.advance(hours=1, seconds=1)
        noop_helper(idempotency_key="k-new-done", payload=2)
        assert idempotency_keys_prune() == 1
    assert set(IdempotencyKey.objects.values_list("key", flat=True)) == {"k-old-busy", "k-new-done"}


SENT: list[dict[str, Any]] = []


@idempotent(tool="example.refund")
def refund(*, charge_id: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    SENT.append({"charge_id": charge_id, "amount": amount, "key": idempotency_key})
    return {"refund": {"charge_id": charge_id, "amount": amount}}


@idempotent(tool="bench.noop")
def noop_helper(*, payload: Any) -> dict[str, Any]:
    return {"ok": True}


def test_the_self_hosting_helper_runs_a_function_once_per_key(db: Any) -> None:
    SENT.clear()
    first = refund(idempotency_key="refund-1", charge_id="ch_1", amount=500)
    second = refund(idempotency_key="refund-1", charge_id="ch_1", amount=500)
    assert isinstance(first, Outcome) and first.replayed is False
    assert second.replayed is True and second.body == first.body
    assert second.response_headers() == {"Idempotent-Replayed": "true"}
    assert SENT == [{"charge_id": "ch_1", "amount": 500, "key": "refund-1"}]
    from runs.api_errors import ApplicationError

    with pytest.raises(ApplicationError) as reused:
        refund(idempotency_key="refund-1", charge_id="ch_1", amount=501)
    assert (reused.value.code, reused.value.status_code) == ("idempotency_key_reused", 422)
    with pytest.raises(ApplicationError) as missing:
        refund(idempotency_key=None, charge_id="ch_1", amount=500)
    assert missing.value.code == "idempotency_key_required"
    assert len(SENT) == 1


def test_the_helper_refuses_to_run_inside_the_callers_transaction(db: Any) -> None:
    """Inside an open transaction the reservation would be invisible to concurrent requests."""
    from django.db import transaction

    with pytest.raises(RuntimeError, match="inside transaction"), transaction.atomic():
        noop_helper(idempotency_key="k-nested", payload=None)
    assert not IdempotencyKey.objects.filter(key="k-nested").exists()


def test_the_beat_task_prunes_through_the_service(fake_clock: FakeClock) -> None:
    from tools.tasks import prune_idempotency_keys

    noop_helper(idempotency_key="k-beat", payload=None)
    fake_clock.advance(hours=73)
    assert prune_idempotency_keys() == 1
    assert not IdempotencyKey.objects.exists()
