"""A step waiting for approval is desk work like an unknown one: the console's overview counts it,
the oldest-age gauge an alert watches sees it, and the escalation mail says it waits for an
approval (nothing has run), not that it is "unknown"."""

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from dashboard.roles import SUPERVISORS
from review.services.escalations import review_items_escalate
from runs import clock
from runs.models import Step
from tests.review.factories import run_awaiting_approval, user_in

pytestmark = pytest.mark.django_db

TOKEN = "scrape-me-approvals"


@pytest.fixture
def seventeen_minutes_later(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An approval that has waited 17 minutes (the issue's), seen from now."""
    item = run_awaiting_approval()
    later = clock.now() + timedelta(minutes=17)
    monkeypatch.setattr(clock, "now", lambda: later)
    return item


def test_the_overview_counts_a_step_waiting_for_approval(
    client_for: Any, settings: Any, seventeen_minutes_later: Any
) -> None:
    settings.REVIEW_SLA_SECONDS = 15 * 60
    html = client_for(SUPERVISORS).get("/console/").content.decode()
    assert re.search(r'id="queue-depth">1<', html)
    waiting = re.search(r'id="queue-waiting">([^<]*)<', html)
    assert waiting and waiting.group(1) == "1 (0 unknown steps, 1 awaiting approval)"
    assert re.search(r'id="queue-breaches" class="late">1<', html)


def test_the_oldest_age_gauge_sees_a_step_waiting_for_approval(
    settings: Any, seventeen_minutes_later: Any
) -> None:
    settings.METRICS_TOKEN = TOKEN
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    assert samples["intentledger_review_queue_depth"] == 1
    assert samples["intentledger_review_queue_oldest_age_seconds"] >= 17 * 60


def test_the_escalation_mail_says_the_step_waits_for_approval(
    groups: Any, settings: Any, mailoutbox: list[Any], seventeen_minutes_later: Any
) -> None:
    settings.REVIEW_SLA_SECONDS = 15 * 60
    user_in(SUPERVISORS, "alice", email="alice@example.com")
    assert review_items_escalate() == 1
    [mail] = mailoutbox
    assert "unknown" not in mail.body
    assert "has been waiting for approval (nothing has run yet) since" in mail.body
    step = Step.objects.get(run_id=seventeen_minutes_later.run_id, index=1)
    assert f"/queue/{step.run_id}/{step.index}/" in mail.body


def test_an_approval_of_a_cancelled_run_is_not_escalated(
    groups: Any, settings: Any, mailoutbox: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody can decide it any more (approving is refused: the run is finished), so nobody is
    mailed about it."""
    from runs.services.actions import run_cancel

    settings.REVIEW_SLA_SECONDS = 15 * 60
    user_in(SUPERVISORS, "alice", email="alice@example.com")
    item = run_awaiting_approval()
    run_cancel(run_id=item.run_id, by="ada", note="customer withdrew")
    later = clock.now() + timedelta(minutes=17)
    monkeypatch.setattr(clock, "now", lambda: later)
    assert review_items_escalate() == 0
    assert mailoutbox == []
