"""Run actions: the `cancelled` status (final) and forks (`forked_from`, `forked_from_index`).

The SQL (runs/sql/0005_cancel_and_fork.sql) replaces ledger_status_refusal only, so the journal
kernel refuses a worker's write to a cancelled run with run_finished; reversing restores 0003's.
"""

from pathlib import Path

import django.db.models.deletion
from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "sql"
REFUSAL = (SQL / "0005_cancel_and_fork.sql").read_text()

# 0003's ledger_status_refusal, for the way back
REFUSAL_0003 = """
CREATE OR REPLACE FUNCTION ledger_status_refusal(r runs_run, OUT code text, OUT details jsonb)
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF r.status = 'needs_review' THEN
        code := 'needs_review'; details := jsonb_build_object('reason', r.status_reason);
    ELSIF r.status = 'budget_exceeded' THEN
        code := 'budget_exceeded'; details := jsonb_build_object('limit', r.status_reason);
    ELSIF r.status IN ('completed', 'failed', 'abandoned') THEN
        code := 'run_finished'; details := jsonb_build_object('status', r.status);
    END IF;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0004_event_purge_owner_only_and_insert_continues_chain"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="run",
            name="run_status_valid",
        ),
        migrations.AddField(
            model_name="run",
            name="forked_from",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="forks",
                to="runs.run",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="forked_from_index",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("running", "Running"),
                    ("interrupted", "Interrupted"),
                    ("needs_review", "Needs Review"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("abandoned", "Abandoned"),
                    ("budget_exceeded", "Budget Exceeded"),
                    ("cancelled", "Cancelled"),
                ],
                default="pending",
                max_length=20,
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("forked_from__isnull", True), ("forked_from_index__isnull", True)),
                    models.Q(("forked_from__isnull", False), ("forked_from_index__isnull", False)),
                    _connector="OR",
                ),
                name="run_fork_names_its_step",
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "pending",
                            "running",
                            "interrupted",
                            "needs_review",
                            "completed",
                            "failed",
                            "abandoned",
                            "budget_exceeded",
                            "cancelled",
                        ],
                    )
                ),
                name="run_status_valid",
            ),
        ),
        migrations.RunSQL(REFUSAL, REFUSAL_0003),
    ]
