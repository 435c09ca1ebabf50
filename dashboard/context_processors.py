"""What every dashboard page may need to say: how far behind the replica it was read from is,
and how often its live parts poll."""

import time
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections
from django.http import HttpRequest

from config.routers import REPLICA, read_alias

_LAG_SQL = """
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN 0
    WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
    ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0)
END
"""
_cache: dict[str, tuple[float, float | None]] = {}  # "lag" -> (monotonic time read, seconds)


def replica_lag_seconds() -> float | None:
    """Seconds the replica's replay is behind what it has received; read at most every 2 s."""
    read_at, lag = _cache.get("lag", (0.0, None))
    if time.monotonic() - read_at < 2:
        return lag
    try:
        with connections[REPLICA].cursor() as cursor:
            cursor.execute(_LAG_SQL)
            row = cursor.fetchone()
        lag = float(row[0]) if row and row[0] is not None else None
    except DatabaseError:
        lag = None
    _cache["lag"] = (time.monotonic(), lag)
    return lag


def replica_lag(request: HttpRequest) -> dict[str, Any]:
    if read_alias() != REPLICA:
        return {}
    lag = replica_lag_seconds()
    if lag is None or lag <= settings.LEDGER_REPLICA_LAG_WARN_SECONDS:
        return {}
    return {"replica_lag": round(lag)}


def _htmx_interval(seconds: float) -> str:
    """htmx's `every` interval: whole seconds as `5s` (the markup pages have always had), else ms."""
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{round(seconds * 1000)}ms"


def polling(request: HttpRequest) -> dict[str, Any]:
    """The polling intervals of the queue, the runs list, a review item and a live run's page
    (DASHBOARD_POLL_SECONDS, DASHBOARD_LIVE_RUN_POLL_SECONDS), for hx-trigger and the words."""
    every, live_run = settings.DASHBOARD_POLL_SECONDS, settings.DASHBOARD_LIVE_RUN_POLL_SECONDS
    return {
        "poll_every": _htmx_interval(every),
        "poll_seconds": f"{every:g}",
        "live_run_poll_every": _htmx_interval(live_run),
        "live_run_poll_seconds": f"{live_run:g}",
    }


def teams(request: HttpRequest) -> dict[str, Any]:
    """The header's team switch and the team badges: the teams the person may switch to, the
    one they switched to (None: all of them), and whether rows name their team (only when the
    page shows more than one team's rows; an install with one team never sees a team)."""
    from teams import scope
    from teams.middleware import teams_of_person

    user = getattr(request, "user", None)
    mine = teams_of_person(user)
    if len(mine) < 2:
        return {"team_switch": None, "show_teams": False, "team_slugs": {}, "teams_shown": []}
    current = scope.current()
    visible = [t for t in mine if current.sees(t.pk)]
    chosen = visible[0] if len(visible) == 1 else None
    home = next((t for t in mine if t.pk == current.home), None)
    return {
        "team_switch": {"teams": mine, "chosen": chosen, "home": home},
        "show_teams": len(visible) > 1,
        "team_slugs": {t.pk: t.slug for t in mine},
        "teams_shown": [t.slug for t in visible],
    }
