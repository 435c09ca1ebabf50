"""A tool that can say whether a key took effect settles an unknown item by itself; a lookup
that is late (2 s) or fails is "no answer" and the item stays for a person."""

from typing import Any

import pytest
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import SUPERVISORS
from runs.constants import StepState
from tests.review import lookup_fixtures
from tests.review.factories import user_in

pytestmark = pytest.mark.django_db


def _open(unknown_step: Any) -> str:
    client = Client()
    client.force_login(user_in(SUPERVISORS, "sam"))
    return client.get(f"/queue/{unknown_step.run_id}/2/").content.decode()


def _use(settings: Any, name: str) -> None:
    settings.LEDGER_TOOL_LOOKUPS = {"email.send": f"tests.review.lookup_fixtures.{name}"}
    if name == "slow_lookup":  # it answers after 3 s: late, whatever the timeout
        settings.LEDGER_TOOL_LOOKUP_TIMEOUT_SECONDS = 0.5


def test_a_lookup_that_saw_the_key_settles_the_item_as_sent(
    unknown_step: Any, settings: Any
) -> None:
    _use(settings, "provider_lookup")
    lookup_fixtures.SENT_KEYS.add(unknown_step.step.idempotency_key)
    try:
        page = _open(unknown_step)
    finally:
        lookup_fixtures.SENT_KEYS.clear()
    step = unknown_step.step
    assert (step.state, step.resolution_action, step.resolution_by) == (
        StepState.DONE,
        "sent",
        "system:lookup",
    )
    assert "answered completed" in step.resolution_note
    assert "The tool's lookup answered <strong>completed</strong>" in page
    assert AuditEntry.objects.filter(action="step.settle.sent").count() == 1


def test_a_lookup_that_never_saw_the_key_sends_it_back_for_retry(
    unknown_step: Any, settings: Any
) -> None:
    _use(settings, "provider_lookup")
    _open(unknown_step)
    step = unknown_step.step
    assert (step.state, step.resolution_action) == (StepState.INTERRUPTED, "retry")


@pytest.mark.parametrize("name", ["slow_lookup", "broken_lookup"])
def test_a_late_or_failing_lookup_is_no_answer_and_the_item_stays(
    unknown_step: Any, settings: Any, name: str
) -> None:
    _use(settings, name)
    page = _open(unknown_step)
    assert unknown_step.step.state == StepState.UNKNOWN
    assert "gave no answer" in page
    _open(unknown_step)
    assert AuditEntry.objects.filter(action="step.lookup.no_answer").count() == 1


def test_a_tool_without_a_lookup_is_left_to_people(unknown_step: Any, settings: Any) -> None:
    settings.LEDGER_TOOL_LOOKUPS = {}
    page = _open(unknown_step)
    assert unknown_step.step.state == StepState.UNKNOWN
    assert 'id="lookup-answer"' not in page
