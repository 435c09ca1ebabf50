"""`GET /metrics`: Prometheus text format, behind a bearer token (`METRICS_TOKEN`).

Two sources. The hot calls' latency histogram (`intentledger_step_call_seconds{call, code}`,
runs.observe) lives in each process; under gunicorn set `PROMETHEUS_MULTIPROC_DIR` so the
workers' samples are merged (prometheus_client's multiprocess mode). Everything else is read from
the database at scrape time by `LedgerCollector`, so any web process answers the same numbers:

- `intentledger_runs{status}`: runs per status (gauge);
- `intentledger_steps_total`, `intentledger_tokens_total`, `intentledger_recoveries_total`,
  `intentledger_cost_usd_total` by agent (agents an admin named, then the busiest up to
  METRICS_AGENT_LABELS_MAX labels; the rest summed as `agent="other"`);
- `intentledger_duplicates_prevented_total{kind}`: steps replayed from the journal by recoveries,
  and keys reconciled from the tool side; `intentledger_lease_expiries_total`;
- `intentledger_review_queue_depth` and `intentledger_review_queue_oldest_age_seconds`;
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


def metrics_agent_labels_max() -> int:
    return int(getattr(settings, "METRICS_AGENT_LABELS_MAX", 50))


def agent_series(by_agent: list[tuple[Any, ...]]) -> list[tuple[str, int, int, int, float]]:
    """The per-agent rows as label values a worker token cannot multiply: an agent an admin
    named (its own budget policy, a token scoped to it, an approval rule) keeps its label; the
    others, most steps first, fill up to METRICS_AGENT_LABELS_MAX labels; the rest are summed
    under `other`. Agent names are the workers' choice: without this, a token inventing names
    made a series per name in each metric."""
    from runs.models import ApprovalRule, BudgetPolicy, WorkerToken

    named = set(BudgetPolicy.objects.exclude(agent=None).values_list("agent", flat=True))
    named |= set(ApprovalRule.objects.exclude(agent="").values_list("agent", flat=True))
    for agents in WorkerToken.objects.exclude(agents=[]).values_list("agents", flat=True):
        named |= set(agents or [])
    rows = [
        (str(agent), int(s or 0), int(t or 0), int(r or 0), float(usd or 0))
        for agent, s, t, r, usd in by_agent
    ]
    room = max(metrics_agent_labels_max() - len(named & {row[0] for row in rows}), 0)
    unnamed = sorted((row for row in rows if row[0] not in named), key=lambda row: -row[1])
    kept = {row[0] for row in rows if row[0] in named} | {row[0] for row in unnamed[:room]}
    series = [row for row in rows if row[0] in kept and row[0] != OTHER_AGENTS]
    folded = [row for row in rows if row[0] not in kept or row[0] == OTHER_AGENTS]
    if folded:
        series.append(
            (
                OTHER_AGENTS,
                sum(row[1] for row in folded),
                sum(row[2] for row in folded),
                sum(row[3] for row in folded),
                sum(row[4] for row in folded),
            )
        )
    return series


class LedgerCollector(Collector):
    """Reads the fleet's numbers from the database on every scrape."""

    def describe(self) -> Iterator[Metric]:
        return iter(())  # registering must not query the database (collect() would)

    def collect(self) -> Iterator[Metric]:
        from audit.models import ChainAlert
        from review.selectors import DESK_STATES, waiting_count
        from runs.constants import RunStatus
        from runs.models import Step

        with connection.cursor() as cursor:
            cursor.execute("SELECT status, count(*) FROM runs_run GROUP BY status")
            by_status = dict(cursor.fetchall())
            cursor.execute(
                "SELECT agent, sum(step_count), sum(used_tokens), sum(used_recoveries), "
                "sum(used_cost_usd) FROM runs_run GROUP BY agent ORDER BY agent"
            )
            by_agent = cursor.fetchall()
            cursor.execute(
                "SELECT count(*) FILTER (WHERE type = 'reconciled'), "
                "coalesce(sum((payload->>'replayable_steps')::bigint) FILTER ("
                "WHERE type = 'lease_acquired'), 0), "
                "count(*) FILTER (WHERE type = 'lease_expired') "
                # the predicate of event_recovery_at_idx (runs 0001)
                "FROM runs_event WHERE type = 'reconciled' OR type = 'lease_expired' "
                "OR (type = 'lease_acquired' AND (payload->>'recovery') = 'true')"
            )
            reconciled, replayed, expiries = cursor.fetchone() or (0, 0, 0)

        runs = GaugeMetricFamily("intentledger_runs", "Runs by status.", labels=["status"])
        for status in RunStatus.values:
            runs.add_metric([status], int(by_status.get(status, 0)))
        yield runs
        steps = CounterMetricFamily(
            "intentledger_steps", "Steps journalled, by agent.", labels=["agent"]
        )
        tokens = CounterMetricFamily(
            "intentledger_tokens", "Tokens spent (input + output), by agent.", labels=["agent"]
        )
        recoveries = CounterMetricFamily(
            "intentledger_recoveries",
            "Recoveries (leases after a lost one), by agent.",
            labels=["agent"],
        )
        cost = CounterMetricFamily(
            "intentledger_cost_usd", "Cost in US dollars, by agent.", labels=["agent"]
        )
        for agent, n_steps, n_tokens, n_recoveries, usd in agent_series(by_agent):
            steps.add_metric([agent], n_steps)
            tokens.add_metric([agent], n_tokens)
            recoveries.add_metric([agent], n_recoveries)
            cost.add_metric([agent], usd)
        yield from (steps, tokens, recoveries, cost)
        duplicates = CounterMetricFamily(
            "intentledger_duplicates_prevented",
            "Work not done twice: steps replayed from the journal, keys reconciled from the tool side.",
            labels=["kind"],
        )
        duplicates.add_metric(["replayed_steps"], int(replayed))
        duplicates.add_metric([EventType.RECONCILED], int(reconciled))
        yield duplicates
        yield CounterMetricFamily(
            "intentledger_lease_expiries", "Leases the reaper found expired.", value=int(expiries)
        )
        yield GaugeMetricFamily(
            "intentledger_review_queue_depth",
            "Items waiting for a supervisor (unknown steps, steps awaiting approval and "
            "crash-looped runs).",
            value=waiting_count(),
        )
        oldest = (
            Step.objects.filter(state__in=DESK_STATES)
            .order_by("intent_at")
            .values_list("intent_at", flat=True)
            .first()
        )
        yield GaugeMetricFamily(
            "intentledger_review_queue_oldest_age_seconds",
            "Age of the oldest step waiting for a supervisor, unknown or awaiting approval "
            "(0 when the queue is empty).",
            value=(clock.now() - oldest).total_seconds() if oldest else 0.0,
        )
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
