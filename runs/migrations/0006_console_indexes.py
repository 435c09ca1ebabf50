"""Partial indexes for the console's overview and /metrics (issue 16).

- event_recovery_at_idx: only the events that count recoveries, duplicates prevented and lease
  expiries (a reconciled key, a lease after a lost one, an expired lease): a few per thousand
  events, so reading a window of days touches only them. Written in SQL because its predicate
  reads the payload (`recovery`), exactly as console.overview and console.metrics do, so the
  planner can prove the queries' WHERE implies it.
- step_error_outcome_idx: failing steps by outcome time ("top failing steps").
"""

from django.db import migrations, models

RECOVERY_EVENTS = """
CREATE INDEX event_recovery_at_idx ON runs_event (at)
WHERE type = 'reconciled' OR type = 'lease_expired'
    OR (type = 'lease_acquired' AND (payload->>'recovery') = 'true');
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0005_cancel_and_fork")]

    operations = [
        migrations.RunSQL(RECOVERY_EVENTS, "DROP INDEX IF EXISTS event_recovery_at_idx;"),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(
                condition=models.Q(("state", "error")),
                fields=["outcome_at"],
                name="step_error_outcome_idx",
            ),
        ),
    ]
