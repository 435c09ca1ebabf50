"""Serious incidents: opened by an auditor or admin on runs, counted down to the Article 73
deadline of their severity, shown on the overview and in /metrics, audited at every change."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from audit.incidents import incident_open, incident_update
from audit.models import Incident, IncidentRun
from bench.testdata import runs_bulk_create
from dashboard.audit import AuditEntry
from runs.api_errors import ApplicationError


def _metrics(settings: Any) -> dict[str, list[Any]]:
    settings.METRICS_TOKEN = "t0k3n-for-incidents"
    body = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer t0k3n-for-incidents")
    assert body.status_code == 200
    return {f.name: f.samples for f in text_string_to_metric_families(body.content.decode())}


def test_an_auditor_opens_an_incident_and_its_page_counts_down_to_the_deadline(
    client_for: Callable[[str], Client], settings: Any
) -> None:
    ids = runs_bulk_create(runs=3, steps_per_run=1)
    auditor = client_for("auditors")
    aware = timezone.now() - timedelta(hours=30)

    response = auditor.post(
        "/audit/incidents/",
        {
            "title": "Customer data sent to the wrong address",
            "severity": "widespread",
            "aware_at": aware.strftime("%Y-%m-%dT%H:%M"),
            "runs": f"{ids[0]}, {ids[1]}",
            "notes": "Found by support",
        },
    )

    incident = Incident.objects.get()
    assert (
        response.status_code == 302 and response["Location"] == f"/audit/incidents/{incident.pk}/"
    )
    assert incident.status == "open" and incident.opened_by == "auditors-user"
    # widespread: 2 days from awareness, to the minute the form gave
    assert incident.report_due_at == incident.aware_at + timedelta(days=2)
    assert set(IncidentRun.objects.values_list("run_id", flat=True)) == {ids[0], ids[1]}
    entry = AuditEntry.objects.get(action="incident.open")
    assert entry.target == f"incident:{incident.pk}" and len(entry.details["runs"]) == 2

    page = auditor.get(f"/audit/incidents/{incident.pk}/").content.decode()
    assert "0 days 18 hours" in page or "0 days 17 hours" in page  # 48 h less 30 h
    assert str(ids[0]) in page and "held" in page

    overview = client_for("admins").get("/console/").content.decode()
    assert (
        "Customer data sent to the wrong address" in overview
        and "hours</strong> to the" in overview
    )
    samples = _metrics(settings)
    assert samples["intentledger_incidents_open"][0].value == 1
    (due,) = samples["intentledger_incident_report_due_hours"]
    assert due.labels == {"incident": str(incident.pk), "severity": "widespread"}
    assert 17 < due.value < 18.1

    reported = auditor.post(
        f"/audit/incidents/{incident.pk}/",
        {"status": "reported", "notes": "Found by support", "note": "sent to the authority"},
    )
    assert reported.status_code == 302
    incident.refresh_from_db()
    assert incident.status == "reported" and incident.reported_at is not None
    assert AuditEntry.objects.get(action="incident.reported").details["before"]["status"] == "open"
    assert _metrics(settings)["intentledger_incidents_open"][0].value == 0
    assert "Open incidents" not in client_for("admins").get("/console/").content.decode()


def test_supervisors_cannot_see_or_open_incidents(client_for: Callable[[str], Client]) -> None:
    ids = runs_bulk_create(runs=1, steps_per_run=1)
    supervisor = client_for("supervisors")
    assert supervisor.get("/audit/incidents/").status_code == 403
    refused = supervisor.post(
        "/audit/incidents/",
        {"title": "x", "severity": "death", "aware_at": "2026-01-01T00:00", "runs": str(ids[0])},
    )
    assert refused.status_code == 403 and not Incident.objects.exists()


def test_the_severity_sets_the_deadline_and_the_database_holds_it(
    db: Any, user_in: Callable[[str], Any]
) -> None:
    ids = runs_bulk_create(runs=1, steps_per_run=1)
    admin = user_in("admins")
    aware = timezone.now() - timedelta(days=1)
    days = {}
    for severity in ("widespread", "death", "serious"):
        incident = incident_open(
            user=admin, run_ids=ids, title=severity, severity=severity, aware_at=aware
        )
        days[severity] = (incident.report_due_at - incident.aware_at).days
    assert days == {"widespread": 2, "death": 10, "serious": 15}

    # a deadline moved by hand is refused by the database
    with pytest.raises(IntegrityError), transaction.atomic():
        Incident.objects.filter(severity="death").update(report_due_at=aware + timedelta(days=30))
    # a closed incident is final; an unknown run is refused
    one = Incident.objects.get(severity="serious")
    incident_update(user=admin, incident_id=one.pk, status="closed", note="false alarm")
    with pytest.raises(ApplicationError):
        incident_update(user=admin, incident_id=one.pk, status="open")
    with pytest.raises(ApplicationError):
        incident_open(
            user=admin,
            run_ids=["6d1c4f8e-0000-4000-8000-000000000000"],
            title="nothing",
            severity="serious",
            aware_at=aware,
        )
    assert [e.action for e in AuditEntry.objects.order_by("id")] == [
        "incident.open",
        "incident.open",
        "incident.open",
        "incident.closed",
    ]


def test_a_runs_page_offers_an_auditor_to_open_an_incident_on_it(
    client_for: Callable[[str], Client],
) -> None:
    run_id = runs_bulk_create(runs=1, steps_per_run=1)[0]
    auditor = client_for("auditors")
    page = auditor.get(f"/runs/{run_id}/").content.decode()
    assert f"/audit/incidents/?run={run_id}#open-incident" in page
    form = auditor.get(f"/audit/incidents/?run={run_id}").content.decode()
    assert f"{run_id}</textarea>" in form
    assert (
        "open-incident-link"
        not in client_for("supervisors").get(f"/runs/{run_id}/").content.decode()
    )
