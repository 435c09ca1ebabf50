"""What leaves the ledger for one team carries only that team's work: an escalation of returns'
item reaches neither billing's address nor billing's webhook, and billing's auditor's finished
export (a background job, or one streamed at once) holds no run of returns."""

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core import mail

from audit.models import ExportJob, ExportStatus
from audit.signing import private_key_generate
from audit.tasks import export_job_run_task
from review.models import Escalation, EscalationWebhook, WebhookDelivery
from review.services.escalations import review_items_escalate
from runs import clock
from runs.models import Run, Step
from teams.models import Team
from teams.scope import team_scope
from teams.services import team_create
from tests.console.factories import journalled_run
from tests.teams.test_switch_and_roles import item_in, person

pytestmark = pytest.mark.django_db


@pytest.fixture
def billing() -> Team:
    return team_create(slug="billing", name="Billing", actor="tests")


@pytest.fixture
def returns() -> Team:
    return team_create(slug="returns", name="Returns", actor="tests")


def overdue(item: Any) -> None:
    Step.objects.filter(run_id=item.run_id, index=2).update(
        intent_at=clock.now() - timedelta(hours=2)
    )


def webhook_of(team: Team, url: str) -> EscalationWebhook:
    with team_scope(team.pk):
        return EscalationWebhook.objects.create(url=url, secret="s")


def test_an_escalation_of_returns_item_never_reaches_billing_address_or_webhook(
    settings: Any, billing: Team, returns: Team
) -> None:
    settings.REVIEW_SLA_SECONDS = 60 * 60
    Team.objects.filter(pk=billing.pk).update(escalation_email="billing@example.com")
    billing_hook = webhook_of(billing, "https://billing.example/hook")
    bea, _ = person("bea", billing="supervisor")
    bea.email = "bea@example.com"
    bea.save()
    ret = item_in(returns)
    overdue(ret)

    # returns has nobody to tell: its item waits, billing is not told instead
    assert review_items_escalate() == 0
    assert mail.outbox == [] and not WebhookDelivery.objects.exists()
    assert not Escalation.objects.exists()

    returns_hook = webhook_of(returns, "https://returns.example/hook")
    kim, _ = person("kim", returns="supervisor")
    kim.email = "kim@example.com"
    kim.save()
    assert review_items_escalate() == 1

    assert [m.to for m in mail.outbox] == [["kim@example.com"]]
    assert str(ret.run_id) in mail.outbox[0].body
    deliveries = list(WebhookDelivery.objects.all())
    assert [d.webhook_id for d in deliveries] == [returns_hook.pk]
    assert not WebhookDelivery.objects.filter(webhook=billing_hook).exists()
    assert str(Escalation.objects.get().run_id) == ret.run_id


def test_billing_auditors_finished_exports_hold_no_run_of_returns(
    settings: Any, tmp_path: Path, billing: Team, returns: Team, bound_by_rls: None
) -> None:
    settings.AUDIT_SIGNING_KEY = private_key_generate()
    settings.AUDIT_EXPORT_DIR = str(tmp_path / "exports")
    with team_scope(billing.pk):
        ours = [journalled_run(2, agent="billing-agent")[0] for _ in range(3)]
    with team_scope(returns.pk):
        theirs = [journalled_run(2, agent="returns-agent")[0] for _ in range(3)]
    assert Run.objects.count() == 6  # the test's own scope sees both teams
    _, auditor = person("abe", billing="auditor")

    # streamed at once (at most AUDIT_EXPORT_SYNC_MAX_RUNS runs): the CSV
    settings.AUDIT_EXPORT_SYNC_MAX_RUNS = 100
    streamed = auditor.post("/audit/exports/", {"format": "csv"})
    assert streamed.status_code == 200
    csv = b"".join(streamed.streaming_content).decode()  # type: ignore[attr-defined]
    for run in ours:
        assert str(run.pk) in csv
    for run in theirs:
        assert str(run.pk) not in csv
    assert "returns-agent" not in csv

    # a background job, run as the Celery task runs it (under the job's team): the JSONL
    settings.AUDIT_EXPORT_SYNC_MAX_RUNS = 1
    queued = auditor.post("/audit/exports/", {"format": "jsonl"})
    assert queued.status_code == 302
    job = ExportJob.objects.get()
    assert job.team_id == billing.pk and job.total_runs == 3
    assert export_job_run_task(str(job.pk)) == ExportStatus.DONE
    job.refresh_from_db()
    assert job.done_runs == 3
    download = auditor.get(f"/audit/exports/{job.pk}/download")
    assert download.status_code == 200
    jsonl = b"".join(download.streaming_content).decode()  # type: ignore[attr-defined]
    assert jsonl == job.path.read_text()
    for run in ours:
        assert str(run.pk) in jsonl
    for run in theirs:
        assert str(run.pk) not in jsonl
    assert "returns-agent" not in jsonl
