"""The overview's rollup: runs per (day, agent, status), recomputed by beat (console.tasks)."""

from decimal import Decimal

from django.db import models
from django.db.models import Q

from teams.fields import TeamField


class RunDay(models.Model):
    """Runs created on `day` (UTC) by `agent` now in `status`, with their usage.

    A cache, never a record: `run_days_refresh` deletes and recomputes whole days from runs_run,
    so a run that changes status after its day was rolled up is counted right at the next
    refresh. Today's row holds the runs created before `refreshed_at`; the overview reads the
    later ones live.
    """

    day = models.DateField()
    agent = models.CharField(max_length=100)
    status = models.CharField(max_length=20)
    runs = models.PositiveIntegerField()
    tokens = models.PositiveBigIntegerField()
    cost_usd = models.DecimalField(max_digits=18, decimal_places=6, default=Decimal(0))
    recoveries = models.PositiveBigIntegerField()
    refreshed_at = models.DateTimeField()
    team = TeamField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team", "day", "agent", "status"], name="runday_unique"
            ),
            models.CheckConstraint(condition=Q(runs__gte=1), name="runday_has_runs"),
        ]
        ordering = ["day", "agent", "status"]

    def __str__(self) -> str:
        return f"{self.day} {self.agent} {self.status}: {self.runs}"
