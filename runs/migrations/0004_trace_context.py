"""Traces (issue 49, traces/): the caller's trace context on the run, and each event's
transaction id, so the trace exporter reads the journal in commit-safe order.

`runs_event.xact` is the inserting transaction's id (xid8, a DEFAULT: no writer names it). Event
ids are drawn before commit, so a transaction holding a lower id may commit after one holding a
higher id, and a cursor "id > last" would skip it; the exporter instead reads only events whose
transaction is older than every transaction still in flight (pg_snapshot_xmin), in (xact, id)
order, where no later commit can land behind its cursor (traces.exporter). Events written before
this migration have no xact and are never exported. The default is set after the column is
added, so adding it rewrites no partition."""

from django.db import migrations, models

EVENT_XACT = """
ALTER TABLE runs_event ADD COLUMN xact xid8;
ALTER TABLE runs_event ALTER COLUMN xact SET DEFAULT pg_current_xact_id();
CREATE INDEX event_xact_idx ON runs_event (xact, id);
"""
EVENT_XACT_REVERSE = """
DROP INDEX IF EXISTS event_xact_idx;
ALTER TABLE runs_event DROP COLUMN xact;
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0003_journal_months_ahead")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="trace_id",
            field=models.CharField(blank=True, editable=False, max_length=32, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="trace_parent_span_id",
            field=models.CharField(blank=True, editable=False, max_length=16, null=True),
        ),
        migrations.RunSQL(EVENT_XACT, EVENT_XACT_REVERSE),
    ]
