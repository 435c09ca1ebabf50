"""Serious incidents (EU AI Act Art. 73): opened on runs, counted down to their reporting deadline.

An admin or auditor opens an incident on one or more runs with its severity and when the
organisation became aware; the deadline follows from the severity (2, 10 or 15 days, written
once in audit.models.INCIDENT_REPORT_DAYS and held by a constraint). Until it is closed its runs
are held: retention never purges them. Every change is an audit entry in the same transaction.

Lock precondition: none held by the caller; a change locks the incident row
(`select_for_update`) in its own transaction.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import QuerySet

from audit.models import (
    INCIDENT_HOLDING_STATUSES,
    INCIDENT_REPORT_DAYS,
    INCIDENT_TRANSITIONS,
    Incident,
    IncidentRun,
    IncidentSeverity,
    IncidentStatus,
)
from audit.permissions import can_export, is_admin
from dashboard.audit import audit_record
from runs import clock
from runs.api_errors import ApplicationError, invalid
from runs.models import Run


def can_manage_incidents(user: Any) -> bool:
    """Admins and auditors open and update incidents; supervisors do not."""
    return can_export(user) or is_admin(user)


def incident_report_due(*, severity: str, aware_at: datetime) -> datetime:
    return aware_at + timedelta(days=INCIDENT_REPORT_DAYS[severity])


def _values(incident: Incident) -> dict[str, Any]:
    return {
        "title": incident.title,
        "severity": incident.severity,
        "aware_at": incident.aware_at.isoformat(),
        "report_due_at": incident.report_due_at.isoformat(),
        "status": incident.status,
        "notes": incident.notes,
    }


def _run_ids_check(run_ids: Iterable[UUID | str]) -> tuple[list[UUID], int]:
    """The runs' ids, and their one team (an incident is one team's, as its runs are: the
    database holds it too, audit migration 0005). A run the caller's scope does not show is
    "no such run"."""
    try:
        ids = sorted({UUID(str(r)) for r in run_ids})
    except ValueError:
        raise invalid("runs", "Not a run id.", "Give run ids (UUIDs).") from None
    if not ids:
        raise invalid("runs", "An incident names at least one run.", "Name at least one run.")
    found = dict(Run.objects.filter(pk__in=ids).values_list("pk", "team_id"))
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise invalid("runs", f"No such run: {', '.join(missing)}.", "No such run.")
    teams = set(found.values())
    if len(teams) > 1:
        message = "An incident names runs of one team; these are of several: open one per team."
        raise invalid("runs", message, "Runs of one team.")
    return ids, teams.pop()


def _fields_check(*, title: str, severity: str, aware_at: datetime, now: datetime) -> None:
    if not title.strip():
        raise invalid("title", "An incident needs a title.", "Required.")
    if severity not in INCIDENT_REPORT_DAYS:
        raise invalid("severity", "Unknown severity.", f"One of {', '.join(IncidentSeverity)}.")
    if aware_at > now + timedelta(minutes=5):
        raise invalid("aware_at", "Awareness cannot be in the future.", "Not in the future.")


def incident_open(
    *,
    user: Any,
    run_ids: Iterable[UUID | str],
    title: str,
    severity: str,
    aware_at: datetime,
    notes: str = "",
) -> Incident:
    """Open an incident on runs: from now on retention keeps them until it is closed."""
    if not can_manage_incidents(user):
        raise ApplicationError(
            "forbidden", "Incidents are for admins and auditors.", status_code=403
        )
    now = clock.now()
    _fields_check(title=title, severity=severity, aware_at=aware_at, now=now)
    ids, team_id = _run_ids_check(run_ids)
    with transaction.atomic():
        incident = Incident.objects.create(
            team_id=team_id,  # its runs' team
            title=title.strip(),
            severity=severity,
            aware_at=aware_at,
            report_due_at=incident_report_due(severity=severity, aware_at=aware_at),
            notes=notes.strip(),
            opened_by=user.get_username(),
            opened_at=now,
            updated_at=now,
        )
        IncidentRun.objects.bulk_create(IncidentRun(incident=incident, run_id=i) for i in ids)
        audit_record(
            actor=user,
            action="incident.open",
            target=f"incident:{incident.pk}",
            team=team_id,
            note=incident.notes,
            details={"after": _values(incident), "runs": [str(i) for i in ids]},
        )
    return incident


def incident_update(
    *,
    user: Any,
    incident_id: int,
    status: str | None = None,
    severity: str | None = None,
    aware_at: datetime | None = None,
    notes: str | None = None,
    note: str = "",
) -> Incident:
    """Change an incident's status (open → reported → closed, or open → closed), its severity
    or awareness time (the deadline follows), or its notes; audited with before and after."""
    if not can_manage_incidents(user):
        raise ApplicationError(
            "forbidden", "Incidents are for admins and auditors.", status_code=403
        )
    now = clock.now()
    with transaction.atomic():
        incident = Incident.objects.select_for_update().filter(pk=incident_id).first()
        if incident is None:
            raise ApplicationError("not_found", "No such incident.", status_code=404)
        before = _values(incident)
        if status is not None and status != incident.status:
            if status not in INCIDENT_TRANSITIONS.get(incident.status, frozenset()):
                raise ApplicationError(
                    "invalid_transition",
                    f"An incident that is {incident.status} cannot become {status}.",
                    details={"status": [f"{incident.status} → {status} is not allowed."]},
                )
            incident.status = status
            if status == IncidentStatus.REPORTED:
                incident.reported_at = now
            if status == IncidentStatus.CLOSED:
                incident.closed_at = now
        if severity is not None or aware_at is not None:
            if incident.status == IncidentStatus.CLOSED:
                raise ApplicationError("invalid_transition", "A closed incident is final.")
            incident.severity = severity or incident.severity
            incident.aware_at = aware_at or incident.aware_at
            _fields_check(
                title=incident.title,
                severity=incident.severity,
                aware_at=incident.aware_at,
                now=now,
            )
            incident.report_due_at = incident_report_due(
                severity=incident.severity, aware_at=incident.aware_at
            )
        if notes is not None:
            incident.notes = notes.strip()
        after = _values(incident)
        if after == before:
            return incident
        incident.updated_at = now
        incident.save()
        audit_record(
            actor=user,
            action=f"incident.{status}"
            if status and before["status"] != status
            else "incident.update",
            target=f"incident:{incident.pk}",
            note=note,
            team=incident.team_id,
            details={"before": before, "after": after},
        )
    return incident


def runs_held_by_open_incidents() -> QuerySet[IncidentRun, Any]:
    """The run ids of incidents not yet closed (a subquery retention excludes)."""
    return IncidentRun.objects.filter(incident__status__in=list(INCIDENT_HOLDING_STATUSES)).values(
        "run_id"
    )


@dataclass(frozen=True)
class IncidentDue:
    incident: Incident
    hours_left: float  # negative once the deadline has passed

    @property
    def overdue(self) -> bool:
        return self.hours_left < 0


def incidents_open_due(*, now: datetime | None = None) -> list[IncidentDue]:
    """Open (not yet reported) incidents, the nearest deadline first, with the hours left."""
    now = now or clock.now()
    return [
        IncidentDue(i, (i.report_due_at - now).total_seconds() / 3600)
        for i in Incident.objects.filter(status=IncidentStatus.OPEN).order_by("report_due_at")
    ]


def incident_metric_families() -> Iterable[Any]:
    """For /metrics: how many incidents are open, and each open one's hours to its deadline."""
    from prometheus_client.core import GaugeMetricFamily

    due = incidents_open_due()
    yield GaugeMetricFamily(
        "intentledger_incidents_open",
        "Serious incidents opened and not yet reported (EU AI Act Art. 73).",
        value=len(due),
    )
    hours = GaugeMetricFamily(
        "intentledger_incident_report_due_hours",
        "Hours left before an open incident's reporting deadline (negative: overdue).",
        labels=["incident", "severity"],
    )
    for d in due:
        hours.add_metric([str(d.incident.pk), d.incident.severity], round(d.hours_left, 3))
    yield hours
