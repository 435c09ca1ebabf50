"""The journal exported as OTLP/HTTP traces: a cursor over committed events, moved only after
the collector accepted the batch (docs/traces.md).

Commit-safe order. Event ids and `at` are drawn before commit, so a transaction holding a lower
id can commit after one holding a higher id: a cursor "id > last" would step over it for ever.
Each event carries its transaction's id (`runs_event.xact`, xid8, runs 0004). A batch reads only
events whose transaction is older than the oldest transaction its statement's snapshot sees in
flight (`_HORIZON`, from pg_current_snapshot()): each of those has committed (or rolled back)
and is visible to the statement, and every transaction that commits later has a larger xact
than all of them. Read in (xact, id) order past the cursor, nothing can land behind
it; the price is that a long transaction holds the export back while it runs. Transaction ids
are the cluster's, so a transaction a backend of another database holds (positively known from
pg_stat_activity) does not hold the horizon: it can write no event of ours (`_HORIZON`).

Once and crash-safe. The cursor row is updated after `export()` answered success, in a guarded
update naming the position the batch started from: a process killed before that update sends
the batch again from the same events with the same span ids (traces.context); killed after it,
the next process starts after it. A collector that is down fails the export: the cursor stays,
the events stay in the journal (the backlog is the journal itself, read a batch at a time, so
the exporter's memory is bounded by the batch), and /metrics shows how far behind it is.
One exporter at a time: a session advisory lock.
"""

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from runs import clock
from traces.models import TraceCursor
from traces.spans import JournalEvent, RunRow, SpanMaker, StepRow, content_captured, needs_step

log = logging.getLogger(__name__)

SERVICE_NAME_DEFAULT = "agent-ledger"
BATCH_EVENTS_DEFAULT = 512
# pg_advisory_lock key of the one exporter ("traces" in ASCII)
EXPORTER_LOCK = 0x747261636573


def endpoint_configured() -> bool:
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set."""
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def ledger_resource() -> Resource:
    """The standard OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; `agent-ledger` when neither
    names the service."""
    resource = Resource.create()  # the SDK reads both variables
    named = os.environ.get("OTEL_SERVICE_NAME", "").strip()
    if not named and str(resource.attributes.get("service.name", "")).startswith("unknown"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME_DEFAULT}))
    return resource


def otlp_exporter() -> SpanExporter:
    """The OpenTelemetry SDK's OTLP/HTTP exporter, configured by the standard OTEL_EXPORTER_OTLP_*
    variables (endpoint, headers, timeout, compression, certificates)."""
    return OTLPSpanExporter()


@dataclass
class ExportReport:
    batches: int = 0
    spans: int = 0
    events: int = 0
    failed: bool = False  # the collector did not accept a batch: its events wait for next time
    busy: bool = False  # another exporter holds the lock


@contextmanager
def exporter_lock(*, wait: bool) -> Iterator[bool]:
    """The one exporter's session advisory lock (`wait`: block until it is free; else yield
    False when another exporter holds it). A session lock needs a session: behind a transaction
    pooler (DATABASE_POOLER=pgbouncer) it is taken on DATABASE_LISTEN_URL's direct connection,
    and closing that connection releases it."""
    if settings.DATABASE_LISTEN_URL:
        url = settings.DATABASE_LISTEN_URL.replace("postgres://", "postgresql://", 1)
        with psycopg.connect(url, autocommit=True) as session:
            if wait:
                session.execute("SELECT pg_advisory_lock(%s)", [EXPORTER_LOCK])
                yield True
            else:
                row = session.execute("SELECT pg_try_advisory_lock(%s)", [EXPORTER_LOCK])
                yield bool(row.fetchone()[0])  # type: ignore[index]
        return
    if settings.DATABASE_POOLER:
        raise ImproperlyConfigured(
            "behind a transaction pooler the trace exporter needs DATABASE_LISTEN_URL, a direct "
            "connection, for its lock"
        )
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_lock(%s)", [EXPORTER_LOCK])
            held = True
        else:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [EXPORTER_LOCK])
            held = bool(cursor.fetchone()[0])  # type: ignore[index]
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [EXPORTER_LOCK])


# Every transaction below the horizon is over, and visible to this statement when it committed:
# the oldest transaction the statement's snapshot sees in flight (pg_snapshot_xip), or the
# snapshot's xmax when none is. One in flight in another database of the cluster does not count
# when pg_stat_activity names its database (the lookup may miss one that ended since: then it
# counts, which only waits). xip holds top-level ids, as runs_event.xact does.
_HORIZON = """
(SELECT coalesce(min(x), pg_snapshot_xmax(pg_current_snapshot()))
 FROM pg_snapshot_xip(pg_current_snapshot()) AS x
 WHERE NOT EXISTS (
     SELECT 1 FROM pg_stat_activity a
     WHERE a.datname IS DISTINCT FROM current_database()
       AND a.backend_xid = (x::text::bigint %% 4294967296)::text::xid))
"""
# the next events past the cursor whose transactions are over (see the module's docstring)
_NEXT_EVENTS = (
    """
SELECT e.id, e.xact::text::bigint, e.run_id, e.journal_month, e.seq, e.type, e.payload, e.actor,
       e.at
FROM runs_event e
WHERE (e.xact, e.id) > (%s::text::xid8, %s)
  AND e.xact < """
    + _HORIZON
    + """
ORDER BY e.xact, e.id
LIMIT %s
"""
)
_RUNS = """
SELECT id, agent, status, created_at, trace_id, trace_parent_span_id, used_tokens,
       used_cost_usd, used_recoveries
FROM runs_run WHERE id = ANY(%s::uuid[])
"""
_STEPS = """
SELECT s.run_id, s.index, s.kind, s.name, s.effect, s.enforced_by, s.arguments, s.result,
       s.state, s.epoch, s.intent_at, s.usage_input_tokens, s.usage_output_tokens,
       s.usage_cost_usd
FROM runs_step s
JOIN unnest(%s::uuid[], %s::int[], %s::date[]) AS wanted(run_id, index, journal_month)
  ON s.run_id = wanted.run_id AND s.index = wanted.index
 AND s.journal_month = wanted.journal_month
"""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def events_pending(*, after_xact: int, after_id: int, limit: int) -> list[JournalEvent]:
    with connection.cursor() as cursor:
        cursor.execute(_NEXT_EVENTS, [after_xact, after_id, limit])
        rows = cursor.fetchall()
    return [
        JournalEvent(
            id=row[0],
            xact=row[1],
            run_id=row[2] if isinstance(row[2], UUID) else UUID(str(row[2])),
            journal_month=row[3],
            seq=row[4],
            type=row[5],
            payload=_json(row[6]) or {},
            actor=row[7],
            at=row[8],
        )
        for row in rows
    ]


def spans_of(events: list[JournalEvent], *, resource: Resource) -> list[Any]:
    """The spans `events` end, with the runs and steps they name read in two statements."""
    run_ids = sorted({str(e.run_id) for e in events})
    wanted = [e for e in events if needs_step(e)]
    with connection.cursor() as cursor:
        cursor.execute(_RUNS, [run_ids])
        runs = {
            (row[0] if isinstance(row[0], UUID) else UUID(str(row[0]))): RunRow(*row)
            for row in cursor.fetchall()
        }
        steps: dict[tuple[UUID, int], StepRow] = {}
        if wanted:
            cursor.execute(
                _STEPS,
                [
                    [str(e.run_id) for e in wanted],
                    [int(e.payload["index"]) for e in wanted],
                    [e.journal_month for e in wanted],
                ],
            )
            for row in cursor.fetchall():
                run_id = row[0] if isinstance(row[0], UUID) else UUID(str(row[0]))
                row = (run_id, *row[1:6], _json(row[6]), _json(row[7]), *row[8:])
                steps[(run_id, row[1])] = StepRow(*row)
    maker = SpanMaker(resource=resource, runs=runs, steps=steps, capture_content=content_captured())
    return maker.spans(events)


def export_batch(*, exporter: SpanExporter, resource: Resource, batch_events: int) -> ExportReport:
    """One batch: the next committed events past the cursor, their spans sent, the cursor moved
    past them only when the collector accepted (an empty report: nothing to export)."""
    report = ExportReport()
    # made by the migration; made again here after a flush of every table (the tests' reset)
    cursor_row, _ = TraceCursor.objects.get_or_create(pk=1)
    start = (cursor_row.event_xact, cursor_row.event_id)
    events = events_pending(after_xact=start[0], after_id=start[1], limit=batch_events)
    if not events:
        return report
    spans = spans_of(events, resource=resource)
    if spans and exporter.export(spans) is not SpanExportResult.SUCCESS:
        log.warning("the collector did not take %d spans: they wait in the journal", len(spans))
        report.failed = True
        return report
    last = events[-1]
    with transaction.atomic():
        moved = TraceCursor.objects.filter(pk=1, event_xact=start[0], event_id=start[1]).update(
            event_xact=last.xact,
            event_id=last.id,
            spans_exported=cursor_row.spans_exported + len(spans),
            batches_exported=cursor_row.batches_exported + 1,
            exported_at=clock.now(),
        )
    if moved != 1:  # another exporter moved it (the lock should make this impossible)
        raise RuntimeError("the trace cursor moved under this exporter")
    report.batches, report.spans, report.events = 1, len(spans), len(events)
    return report


def horizon_now() -> int:
    """The export horizon now: every transaction below it is over (see `_HORIZON`)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + _HORIZON + "::text::bigint", [])  # [] : %% is %
        return int(cursor.fetchone()[0])  # type: ignore[index]


def snapshot_xmax_now() -> int:
    """The first transaction id not yet begun: every transaction that has committed by now is
    below it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        return int(cursor.fetchone()[0])  # type: ignore[index]


def export_pending(
    *,
    exporter: SpanExporter | None = None,
    batch_events: int | None = None,
    wait_for_lock: bool = True,
    committed_wait_seconds: float | None = None,
) -> ExportReport:
    """Export every committed event past the cursor, batch by batch, until none is left or the
    collector refuses one (`failed`: the rest waits for the next call).

    `committed_wait_seconds` (`--once`): every event committed before the call is exported
    before it returns, waiting up to that long for the transactions in flight at the start to
    end (they hold the horizon; `failed` if they outlast the wait)."""
    total = ExportReport()
    batch_events = batch_events or int(
        os.environ.get("TRACES_EXPORT_BATCH_EVENTS", BATCH_EVENTS_DEFAULT)
    )
    own = exporter is None
    exporter = exporter or otlp_exporter()
    resource = ledger_resource()
    try:
        with exporter_lock(wait=wait_for_lock) as held:
            if not held:
                total.busy = True
                return total
            target = snapshot_xmax_now() if committed_wait_seconds is not None else 0
            deadline = time.monotonic() + (committed_wait_seconds or 0)
            while True:
                report = export_batch(
                    exporter=exporter, resource=resource, batch_events=batch_events
                )
                total.batches += report.batches
                total.spans += report.spans
                total.events += report.events
                if report.failed:
                    total.failed = True
                    return total
                if report.events:
                    continue
                if horizon_now() >= target:
                    return total
                if time.monotonic() > deadline:
                    total.failed = True  # a transaction in flight at the start is still open
                    return total
                time.sleep(0.05)
    finally:
        if own:
            exporter.shutdown()
