"""The journal's recovery asks the real key store (settings.LEDGER_KEY_STATE_LOOKUP), end to end.

A write step `enforced_by: ledger` whose worker vanished after its intent: the key record decides,
through the reaper and through a new lease after expiry alike. The gateway records the outcome
with the key's completion, so a completed key with an open intent is what an execution whose
outcome was not recorded leaves (the run moved to another epoch meanwhile, or a gateway from
before it recorded outcomes): `_without_gateway_outcome` makes one.
"""

from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from runs.canonical import arguments_hash
from runs.models import Event, Run, Step
from runs.services.creation import run_create
from runs.services.decisions import step_resolve
from runs.services.enforcement import runs_reap_expired_leases
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.conftest import FakeClock, chain_problems
from tools.idempotency import idempotency_reserve
from tools.models import OutboundEmail
from tools.registry import tool_invoke
from tools.selectors import key_state_for_recovery as idempotency_state_for_recovery

pytestmark = pytest.mark.django_db

EMAIL = {"to": "sam@example.com", "subject": "Your ticket", "body": "We fixed it."}


def _write_intent(arguments: dict[str, Any], name: str = "email.send") -> tuple[Run, Step]:
    run, _ = run_create(agent="support", input={}, actor="test")
    grant = run_lease_acquire(run_id=run.pk, worker="w-1", ttl_seconds=30, actor="test")
    result = step_intent_record(
        run_id=run.pk,
        epoch=grant.epoch,
        index=0,
        kind="tool",
        name=name,
        effect="write",
        enforced_by="ledger",
        arguments=arguments,
        actor="test",
    )
    return run, result.step


@pytest.fixture
def _without_gateway_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tools.registry.step_outcome_from_gateway", lambda **_: None)


def _by_reaper(run: Run) -> None:
    assert runs_reap_expired_leases() == 1


def _by_new_lease(run: Run) -> None:
    try:
        run_lease_acquire(run_id=run.pk, worker="w-2", ttl_seconds=30, actor="test")
    except Exception as exc:  # needs_review is a refusal; the recovery already happened
        assert getattr(exc, "code", None) == "needs_review"


RECOVERIES = [pytest.param(_by_reaper, id="reaper"), pytest.param(_by_new_lease, id="new-lease")]


def _last_event(run: Run, type: str) -> Event:
    return Event.objects.filter(run=run, type=type).latest("seq")


def test_the_configured_lookup_is_the_tool_side() -> None:
    assert settings.LEDGER_KEY_STATE_LOOKUP == "tools.selectors.key_state_for_recovery"


def test_the_gateway_records_the_outcome_with_the_key_and_verification_passes(
    fake_clock: FakeClock,
) -> None:
    run, step = _write_intent(EMAIL)
    sent = tool_invoke(name="email.send", arguments=EMAIL, idempotency_key=step.idempotency_key)
    assert sent.status_code == 200
    step.refresh_from_db()
    assert (step.state, step.result) == ("done", sent.body["result"])
    assert _last_event(run, "step_done").payload["index"] == 0
    assert chain_problems(run.pk) == []


@pytest.mark.parametrize("recover", RECOVERIES)
@pytest.mark.usefixtures("_without_gateway_outcome")
def test_a_completed_key_makes_the_step_done_with_the_stored_result(
    fake_clock: FakeClock, recover: Callable[[Run], None]
) -> None:
    run, step = _write_intent(EMAIL)
    sent = tool_invoke(name="email.send", arguments=EMAIL, idempotency_key=step.idempotency_key)
    assert sent.status_code == 200
    # the worker dies before journalling the outcome; its lease runs out
    fake_clock.advance(seconds=31)
    recover(run)

    step.refresh_from_db()
    assert step.state == "done"
    assert step.result == sent.body["result"]
    event = _last_event(run, "reconciled")
    assert event.payload["key_state"] == "completed"
    assert event.payload["idempotency_key"] == step.idempotency_key
    assert OutboundEmail.objects.count() == 1


@pytest.mark.parametrize("recover", RECOVERIES)
def test_an_absent_key_makes_the_step_interrupted(
    fake_clock: FakeClock, recover: Callable[[Run], None]
) -> None:
    run, step = _write_intent(EMAIL)
    fake_clock.advance(seconds=31)
    recover(run)
    step.refresh_from_db()
    assert step.state == "interrupted"
    assert _last_event(run, "step_interrupted").payload["key_state"] == "absent"


@pytest.mark.parametrize("recover", RECOVERIES)
def test_a_stale_in_progress_key_makes_the_step_unknown_and_the_run_wait_for_review(
    fake_clock: FakeClock, recover: Callable[[Run], None]
) -> None:
    run, step = _write_intent(EMAIL)
    idempotency_reserve(key=step.idempotency_key, tool="email.send", request_hash="0" * 64)
    with override_settings(TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS=60):
        fake_clock.advance(seconds=61)
        recover(run)
    step.refresh_from_db()
    run.refresh_from_db()
    assert step.state == "unknown"
    assert run.status == "needs_review"
    assert _last_event(run, "step_unknown").payload["key_state"] == "in_progress"


def test_a_fresh_in_progress_key_is_interrupted_not_unknown(fake_clock: FakeClock) -> None:
    run, step = _write_intent(EMAIL)
    idempotency_reserve(key=step.idempotency_key, tool="email.send", request_hash="0" * 64)
    with override_settings(TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS=600):
        fake_clock.advance(seconds=31)
        _by_reaper(run)
    step.refresh_from_db()
    assert step.state == "interrupted"


@pytest.mark.usefixtures("_without_gateway_outcome")
def test_a_failed_key_makes_the_step_error_with_the_stored_failure(
    fake_clock: FakeClock,
) -> None:
    arguments = {"ticket_id": 31337, "body": "hello"}
    run, step = _write_intent(arguments, name="tickets.comment")
    failed = tool_invoke(
        name="tickets.comment", arguments=arguments, idempotency_key=step.idempotency_key
    )
    assert failed.status_code == 404
    fake_clock.advance(seconds=31)
    _by_reaper(run)
    step.refresh_from_db()
    assert step.state == "error"
    assert step.result == failed.body
    assert _last_event(run, "reconciled").payload["key_state"] == "failed"


def test_a_supervisor_retry_lets_the_same_key_execute_again(fake_clock: FakeClock) -> None:
    """unknown → retry: the stale key is taken over once, by the re-executed step, not before."""
    run, step = _write_intent(EMAIL)
    idempotency_reserve(
        key=step.idempotency_key,
        tool="email.send",
        request_hash=arguments_hash(EMAIL),
    )
    with override_settings(TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS=60):
        fake_clock.advance(seconds=61)
        _by_reaper(run)
        step.refresh_from_db()
        assert step.state == "unknown"
        with pytest.raises(Exception) as refused:
            tool_invoke(name="email.send", arguments=EMAIL, idempotency_key=step.idempotency_key)
        # an unknown step's key is not an open intent: it waits for the supervisor
        assert getattr(refused.value, "code", None) == "intent_not_journalled"

        fake_clock.advance(seconds=1)
        step_resolve(run_id=run.pk, index=0, action="retry", note="bounced, resend", by="sup")
        fake_clock.advance(seconds=1)
        # the step is interrupted now: the key runs only under its journalled intent again
        with pytest.raises(Exception) as not_yet:
            tool_invoke(name="email.send", arguments=EMAIL, idempotency_key=step.idempotency_key)
        assert getattr(not_yet.value, "code", None) == "intent_not_journalled"
        grant = run_lease_acquire(run_id=run.pk, worker="w-2", ttl_seconds=30, actor="test")
        reopened = step_intent_record(
            run_id=run.pk,
            epoch=grant.epoch,
            index=0,
            kind="tool",
            name="email.send",
            effect="write",
            enforced_by="ledger",
            arguments=EMAIL,
            actor="test",
        )
        assert reopened.step.state == "intent"
        sent = tool_invoke(name="email.send", arguments=EMAIL, idempotency_key=step.idempotency_key)
    assert sent.status_code == 200 and sent.replayed is False
    assert OutboundEmail.objects.count() == 1
    assert idempotency_state_for_recovery(step.idempotency_key).state == "completed"
    step.refresh_from_db()
    assert step.state == "done"
    assert chain_problems(run.pk) == []


def test_an_execution_whose_outcome_was_not_recorded_is_recorded_by_the_next_invoke(
    fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run moved on while the tool ran (its outcome was refused); the step's key replays its
    stored response to the next invoke of the open intent, which records it then."""
    run, step = _write_intent(EMAIL)
    with monkeypatch.context() as refused:
        refused.setattr("tools.registry.step_outcome_from_gateway", lambda **_: None)
        sent = tool_invoke(name="email.send", arguments=EMAIL, idempotency_key=step.idempotency_key)
    step.refresh_from_db()
    assert step.state == "intent"
    again = tool_invoke(name="email.send", arguments=EMAIL, idempotency_key=step.idempotency_key)
    assert again.replayed and again.body == sent.body
    step.refresh_from_db()
    assert (step.state, step.result) == ("done", sent.body["result"])
    assert OutboundEmail.objects.count() == 1
    assert chain_problems(run.pk) == []
