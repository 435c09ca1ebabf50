"""Signed checkpoints over the chain heads, their Merkle leaves, alerts, export jobs, retention."""

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models import Q


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
