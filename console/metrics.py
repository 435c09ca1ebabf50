"""`GET /metrics`: Prometheus text format, behind a bearer token (`METRICS_TOKEN`).

Two sources. The hot calls' latency histogram (`intentledger_step_call_seconds{call, code}`,
runs.observe) lives in each process; under granian's several workers set
`PROMETHEUS_MULTIPROC_DIR` (the image does) so the workers' samples are merged
(prometheus_client's multiprocess mode: a file per worker pid, kept after a worker is recycled,
so its counts stay in the sums; no gauge is kept in those files, so none goes stale). Everything else is read from
the database at scrape time by `LedgerCollector`, so any web process answers the same numbers:

- `intentledger_runs{team, status}`: runs per team and status (gauge);
- `intentledger_steps_total`, `intentledger_tokens_total`, `intentledger_recoveries_total`,
  `intentledger_cost_usd_total` by team and agent (agents an admin named, then the busiest up to
  METRICS_AGENT_LABELS_MAX labels; the rest summed as `agent="other"`);
- `intentledger_duplicates_prevented_total{team, kind}`: steps replayed from the journal by
  recoveries, and keys reconciled from the tool side; `intentledger_lease_expiries_total{team}`;
- `intentledger_review_queue_depth{team}` and `intentledger_review_queue_oldest_age_seconds{team}`;

`team` is the team's slug for the busiest METRICS_TEAM_LABELS_MAX teams (most runs), the rest
summed as `team="other"` (a one-team install shows `team="default"`), so each family has at most
(METRICS_TEAM_LABELS_MAX + 1) x (METRICS_AGENT_LABELS_MAX + 1) series, one grouped statement each.
- `intentledger_chain_alerts_open`: chains the checkpoint job found broken and nobody acknowledged;
- `intentledger_incidents_open` and `intentledger_incident_report_due_hours{incident, severity}`:
  serious incidents not yet reported and the hours left to each one's deadline (audit.incidents).

Cost: one grouped scan of runs_run and one of the three event types per scrape (about a second
at a million runs with ten million events here; scrape every 30 s or more on big tables, or move
these to a rollup table refreshed by beat).
"""

import hmac
import os
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runs import clock
from runs.vocabulary import EventType
from teams.scope import every_team
from traces.metrics import trace_export_metrics

OTHER_AGENTS = "other"
OTHER_TEAMS = "other"


def metrics_agent_labels_max() -> int:
    return int(getattr(settings, "METRICS_AGENT_LABELS_MAX", 50))


def metrics_team_labels_max() -> int:
    return int(getattr(settings, "METRICS_TEAM_LABELS_MAX", 20))


def team_labels(runs_by_team: dict[int, int]) -> dict[int, str]:
    """Each team's `team` label value: its slug for the busiest METRICS_TEAM_LABELS_MAX teams
    (most runs first, then by slug), `other` for the rest. Every team is listed, so a team with
    no run yet shows zeros while there is room; a one-team install shows `team="default"`."""
    from teams.models import Team

    teams = sorted(
        Team.objects.values_list("pk", "slug"),
        key=lambda team: (-runs_by_team.get(team[0], 0), team[1]),
    )
    room = max(metrics_team_labels_max(), 0)
    labels = {pk: slug if n < room else OTHER_TEAMS for n, (pk, slug) in enumerate(teams)}
    for pk in runs_by_team:  # a team made during the scrape: folded, never lost
        labels.setdefault(pk, OTHER_TEAMS)
    return labels


AgentRow = tuple[str, str, int, int, int, float]  # team, agent, steps, tokens, recoveries, usd


def agent_series(by_team_agent: list[tuple[Any, ...]], teams: dict[int, str]) -> list[AgentRow]:
    """The per-team, per-agent rows as label values a worker token cannot multiply: an agent an
    admin named (its own budget policy, a token scoped to it, an approval rule) keeps its label;
    the others, most steps first (over every team), fill up to METRICS_AGENT_LABELS_MAX labels;
    the rest are summed under `other`. Agent names are the workers' choice: without this, a token
    inventing names made a series per name in each metric. Teams are folded first (`teams`, from
    team_labels), so a family has at most (METRICS_TEAM_LABELS_MAX + 1) x (agent labels + 1)
    series."""
    from runs.models import ApprovalRule, BudgetPolicy, WorkerToken

    named = set(BudgetPolicy.objects.exclude(agent=None).values_list("agent", flat=True))
    named |= set(ApprovalRule.objects.exclude(agent="").values_list("agent", flat=True))
    for agents in WorkerToken.objects.exclude(agents=[]).values_list("agents", flat=True):
        named |= set(agents or [])
    rows: list[AgentRow] = [
        (
            teams.get(team_id, OTHER_TEAMS),
            str(agent),
            int(s or 0),
            int(t or 0),
            int(r or 0),
            float(usd or 0),
        )
        for team_id, agent, s, t, r, usd in by_team_agent
    ]
    steps_by_agent: dict[str, int] = {}
    for row in rows:
        steps_by_agent[row[1]] = steps_by_agent.get(row[1], 0) + row[2]
    room = max(metrics_agent_labels_max() - len(named & set(steps_by_agent)), 0)
    unnamed = sorted(
        (agent for agent in steps_by_agent if agent not in named),
        key=lambda agent: (-steps_by_agent[agent], agent),
    )
    kept = (named & set(steps_by_agent)) | set(unnamed[:room])
    kept.discard(OTHER_AGENTS)
    series: dict[tuple[str, str], AgentRow] = {}
    for team, agent, n_steps, n_tokens, n_recoveries, usd in rows:
        key = (team, agent if agent in kept else OTHER_AGENTS)
        _, _, s0, t0, r0, usd0 = series.get(key, (*key, 0, 0, 0, 0.0))
        series[key] = (*key, s0 + n_steps, t0 + n_tokens, r0 + n_recoveries, usd0 + usd)
    order = sorted(series, key=lambda k: (k[0] == OTHER_TEAMS, k[0], k[1] == OTHER_AGENTS, k[1]))
    return [series[key] for key in order]


def _by_team(rows: list[tuple[Any, ...]], teams: dict[int, str]) -> dict[str, list[Any]]:
    """(team_id, figures...) rows summed under each team's label."""
    labelled: dict[str, list[Any]] = {}
    for team_id, *figures in rows:
        totals = labelled.setdefault(teams.get(team_id, OTHER_TEAMS), [0] * len(figures))
        for n, figure in enumerate(figures):
            totals[n] += figure or 0
    return labelled


def _labels_in_order(teams: dict[int, str]) -> list[str]:
    """The team label values, `other` last."""
    return sorted(set(teams.values()), key=lambda label: (label == OTHER_TEAMS, label))


class LedgerCollector(Collector):
    """Reads the fleet's numbers from the database on every scrape."""

    def describe(self) -> Iterator[Metric]:
        return iter(())  # registering must not query the database (collect() would)

    def collect(self) -> Iterator[Metric]:
        from django.db.models import Count, Min

        from audit.models import ChainAlert
        from review.selectors import DESK_STATES, review_runs_without_unknown
        from runs.constants import RunStatus
        from runs.models import Step

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT team_id, status, count(*) FROM runs_run GROUP BY team_id, status"
            )
            by_team_status = cursor.fetchall()
            cursor.execute(
                "SELECT team_id, agent, sum(step_count), sum(used_tokens), sum(used_recoveries), "
                "sum(used_cost_usd) FROM runs_run GROUP BY team_id, agent"
            )
            by_team_agent = cursor.fetchall()
            cursor.execute(
                "SELECT team_id, count(*) FILTER (WHERE type = 'reconciled'), "
                "coalesce(sum((payload->>'replayable_steps')::bigint) FILTER ("
                "WHERE type = 'lease_acquired'), 0), "
                "count(*) FILTER (WHERE type = 'lease_expired') "
                # the predicate of event_recovery_at_idx (runs 0001)
                "FROM runs_event WHERE type = 'reconciled' OR type = 'lease_expired' "
                "OR (type = 'lease_acquired' AND (payload->>'recovery') = 'true') "
                "GROUP BY team_id"
            )
            by_team_events = cursor.fetchall()

        runs_by_team: dict[int, int] = {}
        for team_id, _, n in by_team_status:
            runs_by_team[team_id] = runs_by_team.get(team_id, 0) + int(n)
        teams = team_labels(runs_by_team)
        labels = _labels_in_order(teams)

        by_status: dict[tuple[str, str], int] = {}
        for team_id, status, n in by_team_status:
            key = (teams.get(team_id, OTHER_TEAMS), status)
            by_status[key] = by_status.get(key, 0) + int(n)
        runs = GaugeMetricFamily(
            "intentledger_runs", "Runs by team and status.", labels=["team", "status"]
        )
        for team in labels:
            for status in RunStatus.values:
                runs.add_metric([team, status], by_status.get((team, status), 0))
        yield runs
        steps = CounterMetricFamily(
            "intentledger_steps", "Steps journalled, by team and agent.", labels=["team", "agent"]
        )
        tokens = CounterMetricFamily(
            "intentledger_tokens",
            "Tokens spent (input + output), by team and agent.",
            labels=["team", "agent"],
        )
        recoveries = CounterMetricFamily(
            "intentledger_recoveries",
            "Recoveries (leases after a lost one), by team and agent.",
            labels=["team", "agent"],
        )
        cost = CounterMetricFamily(
            "intentledger_cost_usd",
            "Cost in US dollars, by team and agent.",
            labels=["team", "agent"],
        )
        for team, agent, n_steps, n_tokens, n_recoveries, usd in agent_series(by_team_agent, teams):
            steps.add_metric([team, agent], n_steps)
            tokens.add_metric([team, agent], n_tokens)
            recoveries.add_metric([team, agent], n_recoveries)
            cost.add_metric([team, agent], usd)
        yield from (steps, tokens, recoveries, cost)

        events = _by_team(by_team_events, teams)
        duplicates = CounterMetricFamily(
            "intentledger_duplicates_prevented",
            "Work not done twice: steps replayed from the journal, keys reconciled from the tool "
            "side, by team.",
            labels=["team", "kind"],
        )
        expiries = CounterMetricFamily(
            "intentledger_lease_expiries",
            "Leases the reaper found expired, by team.",
            labels=["team"],
        )
        for team in labels:
            reconciled, replayed, expired = events.get(team, (0, 0, 0))
            duplicates.add_metric([team, "replayed_steps"], int(replayed))
            duplicates.add_metric([team, EventType.RECONCILED], int(reconciled))
            expiries.add_metric([team], int(expired))
        yield from (duplicates, expiries)

        # the desk: waiting steps (with the oldest's age) and crash-looped runs, by team
        waiting = _by_team(
            list(
                Step.objects.filter(state__in=DESK_STATES)
                .order_by()
                .values("team_id")
                .annotate(n=Count("pk"))
                .values_list("team_id", "n")
            )
            + list(
                review_runs_without_unknown()
                .order_by()
                .values("team_id")
                .annotate(n=Count("pk"))
                .values_list("team_id", "n")
            ),
            teams,
        )
        oldest: dict[str, Any] = {}
        for team_id, at in (
            Step.objects.filter(state__in=DESK_STATES)
            .order_by()
            .values("team_id")
            .annotate(at=Min("intent_at"))
            .values_list("team_id", "at")
        ):
            label = teams.get(team_id, OTHER_TEAMS)
            oldest[label] = min(at, oldest.get(label, at))
        depth = GaugeMetricFamily(
            "intentledger_review_queue_depth",
            "Items waiting for a supervisor (unknown steps, steps awaiting approval and "
            "crash-looped runs), by team.",
            labels=["team"],
        )
        age = GaugeMetricFamily(
            "intentledger_review_queue_oldest_age_seconds",
            "Age of the oldest step waiting for a supervisor, unknown or awaiting approval "
            "(0 when the team's queue is empty), by team.",
            labels=["team"],
        )
        now = clock.now()
        for team in labels:
            depth.add_metric([team], int(waiting.get(team, [0])[0]))
            age.add_metric([team], (now - oldest[team]).total_seconds() if team in oldest else 0.0)
        yield from (depth, age)
        yield GaugeMetricFamily(
            "intentledger_chain_alerts_open",
            "Chain verification failures found by the checkpoint job and not acknowledged.",
            value=ChainAlert.objects.filter(acknowledged_at__isnull=True).count(),
        )
        from audit.incidents import incident_metric_families

        yield from incident_metric_families()
        yield from trace_export_metrics()  # the trace exporter's backlog (traces/)


_collector = LedgerCollector()


def register_collector() -> None:
    """Once per process (AppConfig.ready); the default registry then carries the ledger's numbers."""
    if _collector not in REGISTRY._collector_to_names:  # no public "is registered"
        REGISTRY.register(_collector)


def scrape_registry() -> Any:
    """The default registry, or, in multiprocess mode, the merged workers' samples plus ours."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(_collector)
    return registry


def _refuse(status: int, message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status, content_type="text/plain")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """401 without a bearer token, 403 with a wrong one or when METRICS_TOKEN is not set."""
    expected = str(getattr(settings, "METRICS_TOKEN", "") or "")
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return _refuse(401, "metrics need Authorization: Bearer <METRICS_TOKEN>")
    given = header[7:].strip()
    if not expected:
        return _refuse(403, "metrics are disabled: set METRICS_TOKEN")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return _refuse(403, "wrong metrics token")
    with every_team("metrics"):  # the operator's token: figures over every team
        body = generate_latest(scrape_registry())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
