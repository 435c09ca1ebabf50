"""The exporter's backlog on /metrics (console.metrics): how far the traces are behind."""

from collections.abc import Iterator

from django.db import connection
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from runs import clock
from traces.models import TraceCursor

# counting stops here: the gauge says "at least this many" beyond it, and a scrape stays cheap
BACKLOG_COUNT_MAX = 100_000

_BACKLOG = """
SELECT count(*), min(at) FROM (
    SELECT e.at FROM runs_event e
    WHERE (e.xact, e.id) > (%s::text::xid8, %s)
    ORDER BY e.xact, e.id
    LIMIT %s
) pending
"""


def trace_export_metrics() -> Iterator[Metric]:
    cursor_row = TraceCursor.objects.filter(pk=1).first() or TraceCursor(pk=1)
    with connection.cursor() as cursor:
        cursor.execute(_BACKLOG, [cursor_row.event_xact, cursor_row.event_id, BACKLOG_COUNT_MAX])
        pending, oldest = cursor.fetchone() or (0, None)
    yield GaugeMetricFamily(
        "intentledger_trace_export_backlog_events",
        f"Journal events not yet exported as traces (counted up to {BACKLOG_COUNT_MAX}).",
        value=int(pending),
    )
    yield GaugeMetricFamily(
        "intentledger_trace_export_backlog_oldest_age_seconds",
        "Age of the oldest journal event not yet exported as traces (0: none waiting).",
        value=(clock.now() - oldest).total_seconds() if oldest else 0.0,
    )
    yield CounterMetricFamily(
        "intentledger_trace_spans_exported",
        "Spans the collector accepted from the trace exporter.",
        value=cursor_row.spans_exported,
    )
