"""Where the trace exporter is in the journal: one row, moved only after the collector took a
batch (traces.exporter)."""

from django.db import models
from django.db.models import Q


class TraceCursor(models.Model):
    """The last event exported, by its position in commit-safe order: (its transaction's id,
    its id). Events at or before it were sent and accepted; after it, not yet (traces.exporter).
    One row (id 1), made by the migration."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    # runs_event.xact (xid8) as a number: PostgreSQL's 64-bit transaction id (epoch and xid)
    event_xact = models.BigIntegerField(default=0)
    event_id = models.BigIntegerField(default=0)
    spans_exported = models.BigIntegerField(default=0)
    batches_exported = models.BigIntegerField(default=0)
    exported_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="trace_cursor_one_row")]

    def __str__(self) -> str:
        return f"traces exported up to event {self.event_id} (xact {self.event_xact})"
