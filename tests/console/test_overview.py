"""The fleet overview: SQL aggregates over a window of days, drawn as server-side SVG."""

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models import Sum

from bench.testdata import runs_bulk_create
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from review.selectors import waiting_count
from runs.models import Run
from runs.services.steps import step_intent_record, step_outcome_record
from tests.console.factories import evicted_at_step_12, journalled_run
from tests.database import shared_rows
from tests.review.factories import killed_support_run

pytestmark = pytest.mark.django_db


def fleet_of_1000() -> None:
    """1,000 runs over the last 10 days, four agents, five statuses, plus the story's runs."""
    for agent, status, n in [
        ("support", "completed", 500),
        ("support", "failed", 80),
        ("triage", "completed", 250),
        ("triage", "cancelled", 60),
        ("billing", "running", 60),
        ("billing", "needs_review", 48),
    ]:
        runs_bulk_create(runs=n, steps_per_run=3, agent=agent, status=status, spread_days=10)
    evicted_at_step_12()
    killed_support_run(agent="mailer")


def _number(html: str, element_id: str) -> int:
    match = re.search(rf'id="{element_id}">([0-9]+)<', html)
    assert match, element_id
    return int(match.group(1))


class TestAFleetOf1000Runs:
    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def fleet(cls, django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
        """Built once for the three roles (it takes seconds), rolled back after them."""
        with shared_rows(django_db_blocker, fleet_of_1000):
            yield

    @pytest.mark.parametrize("group", [SUPERVISORS, ADMINS, AUDITORS])
    def test_the_overview_renders_1000_runs_from_sql_aggregates(
        self, client_for: Any, group: str
    ) -> None:
        page = client_for(group).get("/console/?days=14")
        assert page.status_code == 200
        html = page.content.decode()
        assert Run.objects.count() == 1000
        assert _number(html, "total-runs") == 1000
        assert _number(html, "total-tokens") == Run.objects.aggregate(t=Sum("used_tokens"))["t"]
        assert _number(html, "total-recoveries") == 1
        assert _number(html, "queue-depth") == waiting_count() == 48 + 1  # loops + unknown
        assert html.count('class="series-completed"') >= 10  # a bar per day with completed runs
        assert 'class="series-cancelled"' in html and 'class="series-recoveries"' in html
        assert html.count('<polyline class="line') == 4  # support, triage, billing, mailer
        assert 'aria-label="Runs by status per day, 1000 runs"' in html


def test_the_overview_lists_failing_steps_and_the_queue_sla(client_for: Any, settings: Any) -> None:
    from datetime import timedelta

    from runs import clock

    settings.REVIEW_SLA_SECONDS = 60
    killed_support_run()
    real = clock.now
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(clock, "now", lambda: real() + timedelta(minutes=5))
        page = client_for(SUPERVISORS).get("/console/")
    html = page.content.decode()
    assert re.search(r'id="queue-breaches" class="late">1<', html)
    assert "No failing steps in this window." in html

    run, epoch = journalled_run(0, agent="closer")
    for index in range(3):
        step_intent_record(
            run_id=run.pk,
            epoch=epoch,
            index=index,
            kind="tool",
            name="tickets.close",
            effect="write",
            enforced_by="ledger",
            arguments={"ticket_id": index, "resolution": "x"},
            actor="worker:w-1",
        )
        step_outcome_record(
            run_id=run.pk,
            index=index,
            epoch=epoch,
            status="error",
            result={"error": {"code": "ticket_not_found", "message": "no such ticket"}},
            usage=None,
            actor="worker:w-1",
        )
    html = client_for(SUPERVISORS).get("/console/").content.decode()
    assert re.search(
        r"<td>tickets.close</td><td class=\"mono\">ticket_not_found</td><td>3</td>", html
    )


def test_the_overview_needs_the_browse_permission(client_for: Any) -> None:
    assert client_for(None).get("/console/").status_code == 403


def _overview_numbers(client: Any) -> tuple[int, int, int, str]:
    html = client.get("/console/?days=14").content.decode()
    bars = re.findall(r'<rect class="series-([a-z_]+)"[^>]*><title>([^<]+)</title>', html)
    return (
        _number(html, "total-runs"),
        _number(html, "total-tokens"),
        len(bars),
        re.search(r'id="rolled-at">([^<]*)<', html).group(1),  # type: ignore[union-attr]
    )


def test_past_days_come_from_the_rollup_beat_refreshes_and_today_is_live(
    client_for: Any,
) -> None:
    from console.models import RunDay
    from console.rollup import run_days_refresh

    runs_bulk_create(runs=299, steps_per_run=2, agent="support", status="completed", spread_days=9)
    # a run of an earlier day still running: it fails after the rollup (below)
    runs_bulk_create(runs=1, steps_per_run=2, agent="support", status="running", spread_days=5)
    client = client_for(SUPERVISORS)
    live = _overview_numbers(client)
    assert live[0] == 300 and "all live" in live[3]

    assert run_days_refresh() > 0
    assert RunDay.objects.filter(status="completed").count() >= 9
    rolled = _overview_numbers(client)
    assert rolled[:3] == live[:3]  # same picture, from the rollup
    assert "as of" in rolled[3]

    journalled_run(1, agent="support")  # a run of today: read live, not from the rollup
    assert _overview_numbers(client)[0] == 301
    # a run of an earlier day that finished since: counted right at the next refresh
    older = Run.objects.filter(agent="support", status="running").order_by("created_at").first()
    assert older is not None
    Run.objects.filter(pk=older.pk).update(status="failed")
    assert "series-failed" not in client.get("/console/?days=14").content.decode()
    run_days_refresh()
    assert 'class="series-failed"' in client.get("/console/?days=14").content.decode()


def test_the_overview_says_how_to_turn_metrics_on_when_they_are_off(
    client_for: Any, settings: Any
) -> None:
    settings.METRICS_TOKEN = ""
    html = client_for(SUPERVISORS).get("/console/").content.decode()
    note = re.search(r'id="metrics-note">(.*?)</p>', html, re.S)
    assert note, "the overview has a note on /metrics"
    assert "are off" in note.group(1) and "METRICS_TOKEN=" in note.group(1)
    assert "scripts/demo" in note.group(1)

    settings.METRICS_TOKEN = "scrape-me"
    html = client_for(SUPERVISORS).get("/console/").content.decode()
    on = re.search(r'id="metrics-note">(.*?)</p>', html, re.S)
    assert on and "are off" not in on.group(1) and "Bearer $METRICS_TOKEN" in on.group(1)
    assert "scrape-me" not in html  # the page never shows the token itself
