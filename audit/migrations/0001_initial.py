"""The audit app at 0.1.0, squashed: a checkpoint leaf's primary key carries run_id. A database
that applied the old chain (`replaces`) marks this one applied."""

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

LEAF_KEY = """
ALTER TABLE audit_checkpointleaf DROP CONSTRAINT audit_checkpointleaf_pkey;
ALTER TABLE audit_checkpointleaf ADD CONSTRAINT audit_checkpointleaf_pkey PRIMARY KEY (id, run_id);
"""


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("audit", "0002_leaf_keys_carry_run_id"),
    ]

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ChainAlert",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("fingerprint", models.CharField(max_length=64)),
                ("created_at", models.DateTimeField()),
                ("last_seen_at", models.DateTimeField()),
                ("times_seen", models.PositiveIntegerField(default=1)),
                ("message", models.TextField()),
                ("breaks", models.JSONField(default=list)),
                ("acknowledged_at", models.DateTimeField(blank=True, null=True)),
                ("acknowledged_by", models.CharField(blank=True, default="", max_length=150)),
                ("acknowledged_note", models.TextField(blank=True, default="")),
            ],
            options={
                "ordering": ["-last_seen_at"],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("acknowledged_at__isnull", True)),
                        fields=("fingerprint",),
                        name="one_open_alert_per_fingerprint",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("acknowledged_at__isnull", True),
                            models.Q(("acknowledged_note", ""), _negated=True),
                            _connector="OR",
                        ),
                        name="alert_acknowledged_with_note",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Checkpoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("seq", models.PositiveIntegerField(unique=True)),
                ("created_at", models.DateTimeField()),
                ("prev_hash", models.CharField(max_length=64)),
                ("hash", models.CharField(max_length=64, unique=True)),
                ("root", models.CharField(max_length=64)),
                ("leaves", models.PositiveIntegerField()),
                ("runs_verified", models.PositiveIntegerField()),
                ("events_verified", models.PositiveBigIntegerField()),
                ("key_id", models.CharField(max_length=16)),
                ("statement", models.JSONField()),
                ("signature", models.CharField(max_length=120)),
                ("created_by", models.CharField(max_length=150)),
            ],
            options={
                "ordering": ["-seq"],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("seq__gte", 1)), name="checkpoint_seq_positive"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="RetentionPolicy",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("enabled", models.BooleanField(default=False)),
                ("keep_days", models.PositiveIntegerField(default=365)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("updated_by", models.CharField(blank=True, default="", max_length=150)),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("id", 1)), name="retention_policy_singleton"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("keep_days__gte", 1)), name="retention_keep_days_min"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="CheckpointLeaf",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("run_id", models.UUIDField()),
                ("event_seq", models.PositiveIntegerField()),
                ("head", models.CharField(max_length=64)),
                ("position", models.PositiveIntegerField()),
                ("path", models.BinaryField()),
                (
                    "checkpoint",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="audit.checkpoint",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("run_id", "event_seq"), name="leaf_head_signed_once"
                    ),
                    models.UniqueConstraint(
                        fields=("checkpoint", "position", "run_id"), name="leaf_position_unique"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="ExportJob",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("created_by_name", models.CharField(max_length=150)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                (
                    "format",
                    models.CharField(choices=[("jsonl", "Jsonl"), ("csv", "Csv")], max_length=10),
                ),
                ("filters", models.JSONField(default=dict)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("done", "Done"),
                            ("failed", "Failed"),
                            ("expired", "Expired"),
                        ],
                        default="queued",
                        max_length=10,
                    ),
                ),
                ("total_runs", models.PositiveIntegerField(default=0)),
                ("done_runs", models.PositiveIntegerField(default=0)),
                ("bytes_written", models.PositiveBigIntegerField(default=0)),
                ("error", models.TextField(blank=True, default="")),
                (
                    "created_by",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
                "indexes": [
                    models.Index(
                        condition=models.Q(("status", "done")),
                        fields=["expires_at"],
                        name="export_done_expiry_idx",
                    )
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("format__in", ["jsonl", "csv"])),
                        name="export_format_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("status__in", ["queued", "running", "done", "failed", "expired"])
                        ),
                        name="export_status_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("status", "done"), _negated=True),
                            ("expires_at__isnull", False),
                            _connector="OR",
                        ),
                        name="export_done_has_expiry",
                    ),
                ],
            },
        ),
        migrations.RunSQL(LEAF_KEY),
    ]
