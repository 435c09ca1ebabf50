"""Recompute the overview's rollup (console.models.RunDay) from runs_run.

Beat calls `run_days_refresh` every `CONSOLE_ROLLUP_SECONDS` (default 300): it replaces the
rows of the last `CONSOLE_ROLLUP_DAYS` (default 31) days and of today (the runs created before
the refresh) in one transaction with one grouped scan of those runs (run_created_idx). The
overview then reads a few hundred rollup rows plus the runs created since the refresh, which
keeps it flat from 100k to 1M runs; a run's status change shows at the next refresh.
"""

from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings
from django.db import connection, transaction

from runs import clock


def day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def run_days_refresh(*, days: int | None = None) -> int:
    """Replace the rollup of the last `days` days and today (the runs created before now);
    returns the rows written. Runs created after the refresh are read live by the overview.
    Per team: the rows of the teams the scope sees are replaced (beat's: every team)."""
    days = days or int(getattr(settings, "CONSOLE_ROLLUP_DAYS", 31))
    now = clock.now()
    today = now.astimezone(UTC).date()
    first = today - timedelta(days=days)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM console_runday WHERE day >= %s", [first])
        cursor.execute(
            "INSERT INTO console_runday "
            "(team_id, day, agent, status, runs, tokens, cost_usd, recoveries, refreshed_at) "
            "SELECT team_id, (created_at AT TIME ZONE 'UTC')::date, agent, status, count(*), "
            "sum(used_tokens), sum(used_cost_usd), sum(used_recoveries), %s "
            "FROM runs_run WHERE created_at >= %s AND created_at < %s GROUP BY 1, 2, 3, 4",
            [now, day_start(first), now],
        )
        return int(cursor.rowcount)
