"""The fleet at a glance: SQL aggregates over a window of days, drawn as server-side SVG.

Runs per day come from the rollup beat keeps (console.rollup: complete days) plus today's runs
read live. Every query is bounded by the window and served by an index: runs by `run_created_idx`, the
recovery events by `event_recovery_at_idx` and failing steps by `step_error_outcome_idx`
(partial indexes, runs 0001), the review queue (unknown steps and steps awaiting
approval) by `step_unknown_idx` and `step_awaiting_approval_idx`.
"""

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Max

from console.models import RunDay
from console.rollup import day_start
from review.selectors import DESK_STATES, review_runs_without_unknown
from review.services.escalations import sla_seconds
from runs import clock
from runs.constants import RunStatus, StepState
from runs.models import Step

CHART_W = 560
CHART_H = 180
PAD_L = 44
PAD_B = 24
STATUS_SERIES = ["completed", "failed", "cancelled", "needs_review", "running", "other"]


def _rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


@dataclass(frozen=True)
class Window:
    since: datetime
    days: list[date]


def _window(days: int, now: datetime) -> Window:
    first = (now - timedelta(days=days - 1)).date()
    since = datetime.combine(first, datetime.min.time(), tzinfo=now.tzinfo)
    return Window(since=since, days=[first + timedelta(days=i) for i in range(days)])


def _series_key(status: str) -> str:
    if status in ("completed", "failed", "cancelled", "needs_review"):
        return status
    if status in (RunStatus.RUNNING, RunStatus.PENDING, RunStatus.INTERRUPTED):
        return "running"
    return "other"


_LIVE_RUNS = (
    "SELECT (created_at AT TIME ZONE 'UTC')::date AS d, agent, status, count(*), "
    "sum(used_tokens), sum(used_cost_usd), sum(used_recoveries) "
    "FROM runs_run WHERE created_at >= %s AND created_at < %s GROUP BY 1, 2, 3"
)


def _runs_by_day(since: datetime) -> tuple[list[tuple[Any, ...]], datetime | None]:
    """(day, agent, status, runs, tokens, cost, recoveries) rows since `since`, and when the
    rolled-up part was computed (None: all live).

    The runs the last rollup covered (its days up to the moment it ran) come from console_runday
    (a few hundred rows); the runs created since, and days older than its range, are read live
    from runs_run.
    """
    far_future = since + timedelta(days=36500)
    rolled_at = RunDay.objects.aggregate(latest=Max("refreshed_at"))["latest"]
    if rolled_at is None:
        return _rows(_LIVE_RUNS, [since, far_future]), None
    rolled_day = rolled_at.astimezone(UTC).date()
    rolled_from = rolled_day - timedelta(days=int(getattr(settings, "CONSOLE_ROLLUP_DAYS", 31)))
    rows = [
        (r.day, r.agent, r.status, r.runs, r.tokens, r.cost_usd, r.recoveries)
        for r in RunDay.objects.filter(day__gte=max(since.date(), rolled_from))
    ]
    if since.date() < rolled_from:
        rows += _rows(_LIVE_RUNS, [since, day_start(rolled_from)])
    rows += _rows(_LIVE_RUNS, [max(since, rolled_at), far_future])
    return rows, rolled_at


def overview(*, days: int = 14) -> dict[str, Any]:
    now = clock.now()
    w = _window(days, now)
    by_day_status, rolled_at = _runs_by_day(w.since)
    runs_by_day: dict[date, dict[str, int]] = {d: dict.fromkeys(STATUS_SERIES, 0) for d in w.days}
    tokens_by_agent: dict[str, dict[date, int]] = {}
    cost_by_agent: dict[str, Decimal] = {}
    totals: dict[str, Any] = {"runs": 0, "tokens": 0, "cost": Decimal(0), "recoveries": 0}
    for d, agent, status, n, tokens, cost, recoveries in by_day_status:
        if d not in runs_by_day:
            continue
        runs_by_day[d][_series_key(status)] += n
        per_agent = tokens_by_agent.setdefault(agent, dict.fromkeys(w.days, 0))
        per_agent[d] += int(tokens or 0)
        cost_by_agent[agent] = cost_by_agent.get(agent, Decimal(0)) + (cost or Decimal(0))
        totals["runs"] += n
        totals["tokens"] += int(tokens or 0)
        totals["cost"] += cost or Decimal(0)
        totals["recoveries"] += int(recoveries or 0)

    recovery_rows = _rows(
        "SELECT (at AT TIME ZONE 'UTC')::date AS d, "
        "count(*) FILTER (WHERE type = 'lease_acquired'), "
        "coalesce(sum((payload->>'replayable_steps')::bigint) FILTER (WHERE type = 'lease_acquired'), 0), "
        "count(*) FILTER (WHERE type = 'reconciled') "
        "FROM runs_event WHERE at >= %s AND ("
        "type = 'reconciled' OR (type = 'lease_acquired' AND payload->>'recovery' = 'true')) "
        "GROUP BY 1",
        [w.since],
    )
    recoveries_by_day = {d: {"recoveries": 0, "duplicates": 0} for d in w.days}
    for d, recoveries, replayed, reconciled in recovery_rows:
        if d in recoveries_by_day:
            recoveries_by_day[d] = {
                "recoveries": int(recoveries),
                "duplicates": int(replayed) + int(reconciled),
            }

    sla = sla_seconds()
    queue = _queue_ages(now, sla)
    crash_loops = review_runs_without_unknown().count()
    failing = _rows(
        "SELECT name, coalesce(result->'error'->>'code', result->'error'->>'type', "
        "result->>'error', result->>'code', '(no code)') AS error, count(*) "
        "FROM runs_step WHERE state = 'error' AND outcome_at >= %s "
        "GROUP BY 1, 2 ORDER BY 3 DESC, 1 LIMIT 10",
        [w.since],
    )
    return {
        "days": days,
        "rolled_at": rolled_at,
        "window": w,
        "totals": totals,
        "runs_chart": _stacked_chart(runs_by_day, STATUS_SERIES),
        "recovery_chart": _stacked_chart(recoveries_by_day, ["recoveries", "duplicates"]),
        "tokens_chart": _lines_chart(tokens_by_agent, w.days),
        "agent_rows": _agent_rows(tokens_by_agent, cost_by_agent),
        "queue": {
            "depth": queue["steps"] + crash_loops,  # review.selectors.waiting_count
            "unknown": queue["unknown"],
            "approvals": queue["steps"] - queue["unknown"],
            "p50": _seconds_text(queue["p50"]),
            "p95": _seconds_text(queue["p95"]),
            "breaches": queue["breaches"],
            "sla_minutes": sla // 60,
        },
        "failing": [{"name": n, "error": e, "count": c} for n, e, c in failing],
    }


def _queue_ages(now: datetime, sla: int) -> dict[str, Any]:
    """The desk's steps (unknown, or awaiting approval): how many of each, the age p50/p95
    (nearest rank) and how many are past the SLA.

    Read along the two states' partial indexes (intent_at, oldest first): counts, two single-row
    probes at the ranks' offsets and a range count, instead of sorting every waiting step's age.
    """
    waiting = Step.objects.filter(state__in=DESK_STATES)
    n = waiting.count()

    def age_at_rank(q: float) -> float | None:
        if not n:
            return None
        offset = n - math.ceil(q * n)  # the k-th youngest is the (n-k)-th oldest
        at = waiting.order_by("intent_at").values_list("intent_at", flat=True)[offset]
        return (now - at).total_seconds()

    return {
        "steps": n,
        "unknown": Step.objects.filter(state=StepState.UNKNOWN).count() if n else 0,
        "p50": age_at_rank(0.5),
        "p95": age_at_rank(0.95),
        "breaches": waiting.filter(intent_at__lt=now - timedelta(seconds=sla)).count() if n else 0,
    }


def _agent_rows(
    tokens_by_agent: dict[str, dict[date, int]], cost_by_agent: dict[str, Decimal]
) -> list[dict[str, Any]]:
    """Agents by tokens spent, with their cost; `n` matches the chart's line colour."""
    totals = sorted(
        ((agent, sum(per.values())) for agent, per in tokens_by_agent.items()), key=lambda r: -r[1]
    )
    return [
        {"agent": agent, "tokens": tokens, "cost": cost_by_agent.get(agent, Decimal(0)), "n": n}
        for n, (agent, tokens) in enumerate(totals[:10])
    ]


def _seconds_text(value: Any) -> str:
    if value is None:
        return "—"
    seconds = float(value)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _scale_max(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return float(step * magnitude)
    return float(value)


def _stacked_chart(by_day: dict[date, dict[str, int]], series: list[str]) -> dict[str, Any]:
    days = list(by_day)
    top = _scale_max(max((sum(v.values()) for v in by_day.values()), default=0))
    plot_w = CHART_W - PAD_L - 8
    plot_h = CHART_H - PAD_B - 8
    slot = plot_w / max(len(days), 1)
    bars = []
    for i, d in enumerate(days):
        y: float = CHART_H - PAD_B
        for name in series:
            value = by_day[d].get(name, 0)
            if not value:
                continue
            h = plot_h * value / top
            y -= h
            bars.append(
                {
                    # numbers as text: the template would localize each float (most of the
                    # page's rendering time at 30 days)
                    "x": f"{PAD_L + i * slot + slot * 0.15:.1f}",
                    "y": f"{y:.1f}",
                    "w": f"{slot * 0.7:.1f}",
                    "h": f"{h:.1f}",
                    "series": name,
                    "title": f"{d:%Y-%m-%d} {name}: {value}",
                }
            )
    labels = [
        {"x": f"{PAD_L + i * slot + slot / 2:.1f}", "text": f"{d:%m-%d}"}
        for i, d in enumerate(days)
        if len(days) <= 14 or i % 2 == 0
    ]
    return {
        "w": CHART_W,
        "h": CHART_H,
        "bars": bars,
        "labels": labels,
        "series": series,
        "top": int(top),
        "axis_x": PAD_L,
        "axis_y": CHART_H - PAD_B,
        "top_y": 8,
        "label_y": CHART_H - 8,
        "total": sum(sum(v.values()) for v in by_day.values()),
    }


def _lines_chart(by_agent: dict[str, dict[date, int]], days: list[date]) -> dict[str, Any]:
    top = _scale_max(max((v for per in by_agent.values() for v in per.values()), default=0))
    plot_w = CHART_W - PAD_L - 8
    plot_h = CHART_H - PAD_B - 8
    step = plot_w / max(len(days) - 1, 1)
    lines = []
    agents = sorted(by_agent, key=lambda a: -sum(by_agent[a].values()))[:6]
    for n, agent in enumerate(agents):
        points = " ".join(
            f"{PAD_L + i * step:.1f},{CHART_H - PAD_B - plot_h * by_agent[agent][d] / top:.1f}"
            for i, d in enumerate(days)
        )
        lines.append(
            {"agent": agent, "points": points, "n": n, "total": sum(by_agent[agent].values())}
        )
    return {
        "w": CHART_W,
        "h": CHART_H,
        "lines": lines,
        "top": int(top),
        "axis_x": PAD_L,
        "axis_y": CHART_H - PAD_B,
        "top_y": 8,
        "label_y": CHART_H - 8,
        "first": f"{days[0]:%m-%d}" if days else "",
        "last": f"{days[-1]:%m-%d}" if days else "",
        "last_x": CHART_W - 8,
    }
