"""Signed checkpoints over the chain heads, their Merkle leaves, alerts, export jobs, retention."""

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models import Q

from teams.fields import TeamField


class Checkpoint(models.Model):
    """One signed statement over every run head that changed since the previous checkpoint.

    CloudTrail-style: `statement.prev` names the previous checkpoint's hash, so removing or
    rewriting one breaks every later one. `statement` is stored exactly as it was signed.
    """

    seq = models.PositiveIntegerField(unique=True)
    created_at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)
    root = models.CharField(max_length=64)
    leaves = models.PositiveIntegerField()
    runs_verified = models.PositiveIntegerField()
    events_verified = models.PositiveBigIntegerField()
    key_id = models.CharField(max_length=16)
    statement = models.JSONField()
    signature = models.CharField(max_length=120)
    created_by = models.CharField(max_length=150)

    class Meta:
        ordering = ["-seq"]
        constraints = [
            models.CheckConstraint(condition=Q(seq__gte=1), name="checkpoint_seq_positive"),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.seq} ({self.leaves} heads)"


class CheckpointLeaf(models.Model):
    """A run's chain head as signed in one checkpoint, with its Merkle path.

    `run_id` is not a foreign key: leaves outlive purged runs, as evidence of what was there.
    A head is signed once: (run_id, event_seq) is unique.
    """

    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.PROTECT, related_name="+")
    run_id = models.UUIDField()
    event_seq = models.PositiveIntegerField()
    head = models.CharField(max_length=64)
    position = models.PositiveIntegerField()
    path = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run_id", "event_seq"], name="leaf_head_signed_once"),
            # run_id too, so the leaves can be distributed by run_id with the journal
            models.UniqueConstraint(
                fields=["checkpoint", "position", "run_id"], name="leaf_position_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.event_seq} in checkpoint {self.checkpoint_id}"

    def path_hex(self) -> list[str]:
        raw = bytes(self.path)
        return [raw[i : i + 32].hex() for i in range(0, len(raw), 32)]


class ChainAlert(models.Model):
    """A broken chain the checkpoint job found and refused to sign; shown in the dashboard."""

    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    times_seen = models.PositiveIntegerField(default=1)
    message = models.TextField()
    breaks = models.JSONField(default=list)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=150, blank=True, default="")
    acknowledged_note = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-last_seen_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["fingerprint"],
                condition=Q(acknowledged_at__isnull=True),
                name="one_open_alert_per_fingerprint",
            ),
            models.CheckConstraint(
                condition=Q(acknowledged_at__isnull=True) | ~Q(acknowledged_note=""),
                name="alert_acknowledged_with_note",
            ),
        ]

    def __str__(self) -> str:
        return self.message


class ExportFormat(models.TextChoices):
    JSONL = "jsonl"
    CSV = "csv"
    EVIDENCE = "evidence"  # an evidence pack (audit.evidence): a signed ZIP


class ExportStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    EXPIRED = "expired"


class ExportJob(models.Model):
    """A bulk export written by a Celery worker; its file is named after the job id only."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    format = models.CharField(max_length=10, choices=ExportFormat.choices)
    filters = models.JSONField(default=dict)
    status = models.CharField(
        max_length=10, choices=ExportStatus.choices, default=ExportStatus.QUEUED
    )
    total_runs = models.PositiveIntegerField(default=0)
    done_runs = models.PositiveIntegerField(default=0)
    bytes_written = models.PositiveBigIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    team = TeamField()  # the team whose runs it holds

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(format__in=ExportFormat.values), name="export_format_valid"
            ),
            models.CheckConstraint(
                condition=Q(status__in=ExportStatus.values), name="export_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status="done") | Q(expires_at__isnull=False),
                name="export_done_has_expiry",
            ),
        ]
        indexes = [
            models.Index(
                fields=["expires_at"], condition=Q(status="done"), name="export_done_expiry_idx"
            )
        ]

    def __str__(self) -> str:
        return f"export {self.id} ({self.format}, {self.status})"

    @property
    def file_name(self) -> str:
        """The download name: built from the id and format, never from anything a user typed."""
        if self.format == ExportFormat.EVIDENCE:
            return f"intentledger-evidence-{self.id}.zip"
        return f"intentledger-export-{self.id}.{self.format}"

    @property
    def path(self) -> Path:
        return Path(settings.AUDIT_EXPORT_DIR) / self.file_name

    @property
    def percent(self) -> int:
        if self.status == ExportStatus.DONE:
            return 100
        return int(100 * self.done_runs / self.total_runs) if self.total_runs else 0


class RetentionPolicy(models.Model):
    """The one retention policy (row id 1): purge finished runs older than `keep_days`."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    enabled = models.BooleanField(default=False)
    keep_days = models.PositiveIntegerField(default=365)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        verbose_name_plural = "retention policies"
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="retention_policy_singleton"),
            models.CheckConstraint(condition=Q(keep_days__gte=1), name="retention_keep_days_min"),
        ]

    def __str__(self) -> str:
        return f"keep {self.keep_days} days ({'on' if self.enabled else 'off'})"


class IncidentSeverity(models.TextChoices):
    """The EU AI Act's Article 73 classes of serious incident, each with its reporting time
    counted from when the organisation became aware (73(2)-(4))."""

    WIDESPREAD = (
        "widespread",
        "Widespread infringement or serious disruption of critical infrastructure (2 days)",
    )
    DEATH = "death", "Death of a person (10 days)"
    SERIOUS = "serious", "Any other serious incident (15 days)"


# days to report, per severity: written once, read by the service, the constraint and the pages
INCIDENT_REPORT_DAYS: dict[str, int] = {
    IncidentSeverity.WIDESPREAD: 2,
    IncidentSeverity.DEATH: 10,
    IncidentSeverity.SERIOUS: 15,
}


class IncidentStatus(models.TextChoices):
    OPEN = "open"
    REPORTED = "reported"
    CLOSED = "closed"


# what an incident may become; closed is final
INCIDENT_TRANSITIONS: dict[str, frozenset[str]] = {
    IncidentStatus.OPEN: frozenset({IncidentStatus.REPORTED, IncidentStatus.CLOSED}),
    IncidentStatus.REPORTED: frozenset({IncidentStatus.CLOSED}),
    IncidentStatus.CLOSED: frozenset(),
}
# an incident holds its runs (retention never purges them) until it is closed
INCIDENT_HOLDING_STATUSES = frozenset({IncidentStatus.OPEN, IncidentStatus.REPORTED})


def _deadline_matches_severity() -> Q:
    from datetime import timedelta

    from django.db.models import F

    matches = Q()
    for severity, days in INCIDENT_REPORT_DAYS.items():
        matches |= Q(severity=severity, report_due_at=F("aware_at") + timedelta(days=days))
    return matches


class Incident(models.Model):
    """A serious incident (EU AI Act Art. 73) an admin or auditor opened on one or more runs.

    `report_due_at` is `aware_at` plus the severity's days, held by a constraint so a hand edit
    cannot move a deadline. While not closed, its runs are never purged (audit.retention).
    """

    title = models.CharField(max_length=200)
    severity = models.CharField(max_length=12, choices=IncidentSeverity.choices)
    aware_at = models.DateTimeField()
    report_due_at = models.DateTimeField()
    status = models.CharField(
        max_length=10, choices=IncidentStatus.choices, default=IncidentStatus.OPEN
    )
    notes = models.TextField(blank=True, default="")
    opened_by = models.CharField(max_length=150)
    opened_at = models.DateTimeField()
    reported_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()
    team = TeamField()

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(severity__in=IncidentSeverity.values), name="incident_severity_valid"
            ),
            models.CheckConstraint(
                condition=Q(status__in=IncidentStatus.values), name="incident_status_valid"
            ),
            models.CheckConstraint(
                condition=_deadline_matches_severity(), name="incident_deadline_of_severity"
            ),
            models.CheckConstraint(condition=~Q(title=""), name="incident_title_not_empty"),
            models.CheckConstraint(
                condition=~Q(status=IncidentStatus.REPORTED) | Q(reported_at__isnull=False),
                name="incident_reported_has_time",
            ),
            models.CheckConstraint(
                condition=~Q(status=IncidentStatus.CLOSED) | Q(closed_at__isnull=False),
                name="incident_closed_has_time",
            ),
            models.CheckConstraint(
                condition=Q(status=IncidentStatus.CLOSED) | Q(closed_at__isnull=True),
                name="incident_only_closed_has_close_time",
            ),
        ]
        indexes = [
            models.Index(
                fields=["report_due_at"],
                condition=Q(status=IncidentStatus.OPEN),
                name="incident_open_due_idx",
            )
        ]

    def __str__(self) -> str:
        return f"incident {self.pk}: {self.title} ({self.severity}, {self.status})"


class IncidentRun(models.Model):
    """A run an incident names. `run_id` is not a foreign key: the incident outlives a run
    purged after it closed, as evidence of what it named."""

    # run_id first: a run's incidents are found by the key, and the key carries the run id as
    # every run-scoped table's does (tests/runs/test_run_scoped_keys.py)
    pk = models.CompositePrimaryKey("run_id", "incident")
    run_id = models.UUIDField()
    incident = models.ForeignKey(Incident, on_delete=models.PROTECT, related_name="runs")
    team = TeamField(db_constraint=False, db_index=False)  # its incident's (teams_team_fill checks)

    def __str__(self) -> str:
        return f"{self.run_id} in incident {self.incident_id}"
