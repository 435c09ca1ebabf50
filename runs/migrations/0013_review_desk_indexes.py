"""Partial indexes for the review desk at size: the queue (unknown + awaiting approval steps,
oldest first) and the runs in review for another reason; both are counted on every dashboard
page; and the decided steps of one tool (the review item's similar past decisions). Steps are a
partitioned table, where PostgreSQL cannot build an index CONCURRENTLY; the run index is built
CONCURRENTLY so a big runs table keeps taking writes while it is made."""

from django.conf import settings
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runs", "0012_journal_partitioned_by_run_month"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(
                    ("status", "needs_review"),
                    models.Q(("status_reason", "unknown_step"), _negated=True),
                ),
                fields=["updated_at", "id"],
                name="run_review_not_unknown_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(
                condition=models.Q(("state__in", ["unknown", "awaiting_approval"])),
                fields=["intent_at", "id"],
                name="step_desk_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(
                condition=models.Q(("resolution_action__isnull", False)),
                fields=["name", "-resolution_at"],
                name="step_decided_by_tool_idx",
            ),
        ),
    ]
