"""Streaming exports of run histories (JSONL, verifiable; CSV, one step per row).

Constant memory: runs are read in keyset-paginated batches of BATCH runs; each batch (runs, their
steps, events and checkpoint leaves) is read in one REPEATABLE READ transaction so a run's head,
events and proof agree, and the batch is turned into bytes and dropped before the next one is
read. No transaction stays open across the whole export (a 100,000-run export holds no snapshot
for minutes). The JSONL format is documented in audit/EXPORT_FORMAT.md.
"""

import csv
import hashlib
import io
import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import UUID

import orjson
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, transaction
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from audit.checkpoints import repeatable_read
from audit.models import Checkpoint, CheckpointLeaf, ExportFormat, ExportJob, ExportStatus
from audit.signing import sign, signing_key_id
from audit.verify import FORMAT, VERSION
from config.routers import read_alias, replica_reads
from runs import clock
from runs.api_errors import ApplicationError
from runs.canonical import GENESIS_HASH
from runs.chain import EVENT_COLUMNS, STEP_COLUMNS, EventRow, StepRow
from runs.constants import RunStatus
from runs.models import Event, Run, Step
from runs.representations import event_json, run_json, step_json

BATCH = 500
Progress = Callable[[int, int], None]  # (runs written, bytes written)


@dataclass(frozen=True)
class ExportFilters:
    """Which runs: created in [created_from, created_to] (dates, UTC), agent, status, one run."""

    created_from: date | None = None
    created_to: date | None = None
    agent: str | None = None
    status: str | None = None
    run_id: UUID | None = None
    agents: tuple[str, ...] = ()  # any of these agents (the evidence pack's --agent A...)

    def queryset(self) -> QuerySet[Run]:
        runs = Run.objects.all()
        if self.created_from:
            runs = runs.filter(
                created_at__gte=datetime.combine(self.created_from, time.min, tzinfo=UTC)
            )
        if self.created_to:
            end = datetime.combine(self.created_to + timedelta(days=1), time.min, tzinfo=UTC)
            runs = runs.filter(created_at__lt=end)
        if self.agent:
            runs = runs.filter(agent=self.agent)
        if self.status:
            runs = runs.filter(status=self.status)
        if self.run_id:
            runs = runs.filter(pk=self.run_id)
        if self.agents:
            runs = runs.filter(agent__in=self.agents)
        return runs

    def as_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            k: (str(v) if v is not None else None) for k, v in asdict(self).items()
        }
        values["agents"] = list(self.agents) or None
        return values


def export_filters_parse(
    *,
    created_from: str | None = None,
    created_to: str | None = None,
    agent: str | None = None,
    status: str | None = None,
    run_id: str | None = None,
    agents: list[str] | tuple[str, ...] = (),
) -> ExportFilters:
    """Validate filters typed by a person (form, command line); every problem is reported."""
    errors: dict[str, list[str]] = {}

    def parse_date(name: str, value: str | None) -> date | None:
        if not value:
            return None
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            errors[name] = [f"{value!r} is not a date (YYYY-MM-DD)."]
            return None

    start = parse_date("created_from", created_from)
    end = parse_date("created_to", created_to)
    if start and end and end < start:
        errors["created_to"] = ["The end date is before the start date."]
    if status and status not in RunStatus.values:
        errors["status"] = [f"One of {', '.join(RunStatus.values)}."]
    if agent is not None and len(agent) > 100:
        errors["agent"] = ["At most 100 characters."]
    named = tuple(sorted({a.strip() for a in agents if a and a.strip()}))
    if any(len(a) > 100 for a in named):
        errors["agents"] = ["At most 100 characters each."]
    parsed_run: UUID | None = None
    if run_id:
        try:
            parsed_run = UUID(run_id)
        except ValueError:
            errors["run_id"] = [f"{run_id!r} is not a run id."]
    if errors:
        raise ApplicationError(
            "validation_error", "Invalid export filters.", status_code=400, details=errors
        )
    return ExportFilters(
        created_from=start,
        created_to=end,
        agent=(agent or "").strip() or None,
        status=status or None,
        run_id=parsed_run,
        agents=named,
    )


_ENCODER = DjangoJSONEncoder()


def _dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON by orjson; JSON columns arrive as raw fragments (no parse, no
    re-encode: about twice the throughput of the standard library)."""
    return orjson.dumps(obj, default=_ENCODER.default)


def _std_json(value: Any) -> orjson.Fragment:
    """A value Django parsed (a run's input, output, error) as a fragment written by the standard
    library, which, unlike orjson, takes integers beyond 64 bits."""
    return orjson.Fragment(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _raw_json(text: str | None) -> orjson.Fragment | None:
    return None if text is None else orjson.Fragment(text)


def _as_text(field: str) -> Cast:
    return Cast(field, output_field=TextField())


@dataclass
class _Batch:
    runs: list[Run]
    steps: dict[UUID, list[StepRow]]
    events: dict[UUID, list[EventRow]]
    leaves: dict[UUID, CheckpointLeaf]


def _batches(
    runs: QuerySet[Run],
    *,
    alias: str,
    upto_checkpoint: int,
    with_events: bool,
    json_column: Callable[[str | None], Any] = _raw_json,
) -> Iterator[_Batch]:
    """Runs in (created_at, id) order, about BATCH at a time, each batch from one snapshot.

    Keyset pages on created_at alone, so PostgreSQL walks the runs' created_at index and every
    page costs the same however deep into the export it is (ordering by (created_at, id) would
    sort all remaining runs for each page). Runs sharing the page's last created_at are all
    taken into that page, then ordered by id.

    JSON columns (arguments, result, payload) are read as PostgreSQL's text and handed to
    `json_column`: raw fragments for JSONL, the text itself for CSV.
    """
    step_fields = [f"{f}_text" if f in ("arguments", "result") else f for f in STEP_COLUMNS]
    event_fields = ["payload_text" if f == "payload" else f for f in EVENT_COLUMNS]
    after: datetime | None = None
    while True:
        with transaction.atomic(using=alias):
            repeatable_read(using=alias)
            with connections[alias].cursor() as cursor:
                # short indexed reads: JIT compilation costs more than it saves (measured: 80 ms
                # of a 110 ms batch query when the planner overestimates the rows)
                cursor.execute("SET LOCAL jit = off")
            runs = runs.using(alias)
            page = runs.filter(created_at__gt=after) if after is not None else runs
            batch_runs = list(page.order_by("created_at")[:BATCH])
            if not batch_runs:
                return
            last_at = batch_runs[-1].created_at
            if len(batch_runs) == BATCH:
                batch_runs = [r for r in batch_runs if r.created_at < last_at]
                batch_runs.extend(runs.filter(created_at=last_at))
            batch_runs.sort(key=lambda r: (r.created_at, r.pk))
            ids = [r.pk for r in batch_runs]
            steps: dict[UUID, list[StepRow]] = defaultdict(list)
            for row in (
                Step.objects.using(alias)
                .filter(run_id__in=ids)
                .annotate(arguments_text=_as_text("arguments"), result_text=_as_text("result"))
                .order_by("run_id", "index")
                .values_list(*step_fields)
            ):
                step = StepRow(*row)
                steps[step.run_id].append(
                    step._replace(
                        arguments=json_column(step.arguments), result=json_column(step.result)
                    )
                )
            events: dict[UUID, list[EventRow]] = defaultdict(list)
            leaves: dict[UUID, CheckpointLeaf] = {}
            if with_events:
                for row in (
                    Event.objects.using(alias)
                    .filter(run_id__in=ids)
                    .annotate(payload_text=_as_text("payload"))
                    .order_by("run_id", "seq")
                    .values_list(*event_fields)
                ):
                    event = EventRow(*row)
                    events[event.run_id].append(event._replace(payload=json_column(event.payload)))
                for leaf in (
                    CheckpointLeaf.objects.using(alias)
                    .filter(run_id__in=ids, checkpoint__seq__lte=upto_checkpoint)
                    .select_related("checkpoint")
                    .order_by("run_id", "-event_seq")
                    .distinct("run_id")
                ):
                    leaves[leaf.run_id] = leaf
        after = last_at
        yield _Batch(batch_runs, steps, events, leaves)


def _first_checkpoint_needed(runs: QuerySet[Run], upto: int, alias: str) -> int | None:
    """The oldest checkpoint any of these runs' latest signed head lives in."""
    sql, params = runs.values("pk").query.sql_with_params()
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"""
            SELECT MIN(latest) FROM (
                SELECT MAX(c.seq) AS latest FROM audit_checkpointleaf l
                JOIN audit_checkpoint c ON c.id = l.checkpoint_id
                WHERE c.seq <= %s AND l.run_id IN ({sql})
                GROUP BY l.run_id) AS heads
            """,  # noqa: S608 -- sql is the ORM's own query, params stay bound
            [upto, *params],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def _run_record(run: Run, batch: _Batch) -> dict[str, Any]:
    steps = [step_json(s) for s in batch.steps.get(run.pk, [])]
    leaf = batch.leaves.get(run.pk)
    return {
        "run": run_json(run)
        | {
            "input": _std_json(run.input),
            "output": _std_json(run.output),
            "error": _std_json(run.error),
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        },
        "chain": {"seq": run.event_seq, "head": run.event_head or GENESIS_HASH},
        "steps": steps,
        "resolutions": [
            {"index": s["index"], **s["resolution"]} for s in steps if s["resolution"] is not None
        ],
        "events": [event_json(e) for e in batch.events.get(run.pk, [])],
        "checkpoint": (
            {
                "seq": leaf.checkpoint.seq,
                "event_seq": leaf.event_seq,
                "index": leaf.position,
                "path": leaf.path_hex(),
            }
            if leaf is not None
            else None
        ),
    }


def export_jsonl(
    *, filters: ExportFilters, progress: Progress | None = None, alias: str = "default"
) -> Iterator[bytes]:
    """The JSONL export, line by line (each ends with a newline), ending in a signed trailer.

    `alias`: where to read (config.routers.read_alias() of whoever asked: a replica for the
    dashboard and the export job when one is configured).
    """
    started = clock.now()
    runs = filters.queryset().using(alias).filter(created_at__lte=started)
    latest = Checkpoint.objects.using(alias).order_by("-seq").first()
    upto = latest.seq if latest else 0
    key_id = signing_key_id()
    n = 0
    prev = GENESIS_HASH
    written = 0

    def line(obj: dict[str, Any]) -> bytes:
        nonlocal n, prev, written
        n += 1
        raw = _dumps({"kind": obj.pop("kind"), "n": n, "prev": prev, **obj})
        prev = hashlib.sha256(raw).hexdigest()
        written += len(raw) + 1
        return raw + b"\n"

    yield line(
        {
            "kind": "header",
            "format": FORMAT,
            "version": VERSION,
            "created_at": started.isoformat(),
            "filters": filters.as_dict(),
            "key_id": key_id,
            "checkpoint": upto or None,
        }
    )
    first = _first_checkpoint_needed(runs, upto, alias) if upto else None
    checkpoints = 0
    if first is not None:
        for checkpoint in (
            Checkpoint.objects.using(alias).filter(seq__gte=first, seq__lte=upto).order_by("seq")
        ):
            checkpoints += 1
            yield line(
                {
                    "kind": "checkpoint",
                    "statement": checkpoint.statement,
                    "hash": checkpoint.hash,
                    "signature": checkpoint.signature,
                }
            )
    count = 0
    for batch in _batches(runs, alias=alias, upto_checkpoint=upto, with_events=True):
        chunk = b"".join(line({"kind": "run", **_run_record(run, batch)}) for run in batch.runs)
        count += len(batch.runs)
        yield chunk
        if progress:
            progress(count, written)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "created_at": started.isoformat(),
        "lines": n,
        "runs": count,
        "checkpoints": checkpoints,
        "last_line_hash": prev,
        "key_id": key_id,
    }
    yield _dumps({"kind": "trailer", "manifest": manifest, "signature": sign(manifest)}) + b"\n"


CSV_COLUMNS = [
    "run_id", "agent", "external_id", "run_status", "run_created_at", "run_finished_at",
    "run_event_seq", "run_event_head", "step_index", "kind", "name", "effect", "enforced_by",
    "state", "arguments", "arguments_hash", "idempotency_key", "result", "input_tokens",
    "output_tokens", "cost_usd", "epoch", "executions", "intent_at", "outcome_at",
    "resolution_action", "resolution_by", "resolution_note", "resolution_at",
]  # fmt: skip
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    """Text a spreadsheet would run as a formula gets a leading quote (OWASP CSV injection)."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"), cls=DjangoJSONEncoder)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _step_cells(step: StepRow) -> list[Any]:
    return [
        step.index, step.kind, step.name, step.effect, step.enforced_by, step.state,
        step.arguments, step.arguments_hash, step.idempotency_key, step.result,
        step.usage_input_tokens, step.usage_output_tokens, step.usage_cost_usd, step.epoch,
        step.executions, step.intent_at, step.outcome_at, step.resolution_action,
        step.resolution_by, step.resolution_note, step.resolution_at,
    ]  # fmt: skip


def _keep(text: str | None) -> str | None:
    return text


def export_csv(
    *, filters: ExportFilters, progress: Progress | None = None, alias: str = "default"
) -> Iterator[bytes]:
    """One step per row (a run without steps gets one row with empty step columns)."""
    started = clock.now()
    runs = filters.queryset().using(alias).filter(created_at__lte=started)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    written = 0
    count = 0

    def flush() -> bytes:
        nonlocal written
        data = buffer.getvalue().encode("utf-8")
        buffer.seek(0)
        buffer.truncate()
        written += len(data)
        return data

    yield flush()
    for batch in _batches(
        runs, alias=alias, upto_checkpoint=0, with_events=False, json_column=_keep
    ):
        for run in batch.runs:
            run_cells = [
                run.pk, run.agent, run.external_id, run.status, run.created_at,
                run.finished_at, run.event_seq, run.event_head,
            ]  # fmt: skip
            steps: list[StepRow | None] = list(batch.steps.get(run.pk, [])) or [None]
            for step in steps:
                step_cells = _step_cells(step) if step else [None] * (len(CSV_COLUMNS) - 8)
                writer.writerow([_cell(v) for v in run_cells + step_cells])
        count += len(batch.runs)
        yield flush()
        if progress:
            progress(count, written)


def export_stream(
    *, filters: ExportFilters, format: str, progress: Progress | None = None
) -> Iterator[bytes]:
    """The export's lines; the database to read is chosen now, not when streaming starts."""
    alias = read_alias()
    if format == ExportFormat.JSONL:
        return export_jsonl(filters=filters, progress=progress, alias=alias)
    if format == ExportFormat.CSV:
        return export_csv(filters=filters, progress=progress, alias=alias)
    raise ApplicationError(
        "validation_error",
        "Unknown format.",
        status_code=400,
        details={"format": [f"One of {', '.join(ExportFormat.values)}."]},
    )


def export_content_type(format: str) -> str:
    if format == ExportFormat.EVIDENCE:
        return "application/zip"
    return "text/csv; charset=utf-8" if format == ExportFormat.CSV else "application/x-ndjson"


# --- bulk exports as background jobs ---------------------------------------------------------


def export_job_create(*, user: Any, filters: ExportFilters, format: str) -> ExportJob:
    """Queue a bulk export; the Celery task starts after this transaction commits."""
    from audit.tasks import export_job_run_task
    from dashboard.audit import audit_record

    if format not in ExportFormat.values:
        raise ApplicationError("validation_error", "Unknown format.", status_code=400)
    with transaction.atomic():
        job = ExportJob.objects.create(
            created_by=user,
            created_by_name=user.get_username(),
            format=format,
            filters=filters.as_dict(),
            total_runs=filters.queryset().count(),
        )
        audit_record(
            actor=user,
            action="export.queue",
            target=f"export:{job.pk}",
            details={"format": format, "filters": job.filters, "runs": job.total_runs},
        )
        export_job_run_task.delay_on_commit(str(job.pk))  # type: ignore[attr-defined]
    return job


def _filters_from_job(job: ExportJob) -> ExportFilters:
    f = job.filters
    return export_filters_parse(
        created_from=f.get("created_from"),
        created_to=f.get("created_to"),
        agent=f.get("agent"),
        status=f.get("status"),
        run_id=f.get("run_id"),
        agents=f.get("agents") or (),
    )


def export_job_run(*, job_id: UUID | str) -> ExportJob | None:
    """Write the job's file (a redelivered task starts it over); progress is saved per batch."""
    claimed = ExportJob.objects.filter(
        pk=job_id, status__in=[ExportStatus.QUEUED, ExportStatus.RUNNING]
    ).update(status=ExportStatus.RUNNING, started_at=clock.now(), done_runs=0, bytes_written=0)
    if not claimed:
        return None
    job = ExportJob.objects.get(pk=job_id)
    directory = job.path.parent
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{job.pk}.part"

    def progress(runs: int, written: int) -> None:
        ExportJob.objects.filter(pk=job.pk).update(done_runs=runs, bytes_written=written)

    try:
        with partial.open("wb") as handle, replica_reads():
            if job.format == ExportFormat.EVIDENCE:
                from audit.evidence import evidence_pack_write, evidence_scope_of_job

                evidence_pack_write(
                    scope=evidence_scope_of_job(job.filters),
                    target=handle,
                    progress=progress,
                    generated_by=job.created_by_name,
                )
            else:
                for chunk in export_stream(
                    filters=_filters_from_job(job), format=job.format, progress=progress
                ):
                    handle.write(chunk)
        os.replace(partial, job.path)
    except Exception as exc:
        partial.unlink(missing_ok=True)
        ExportJob.objects.filter(pk=job.pk).update(
            status=ExportStatus.FAILED, finished_at=clock.now(), error=str(exc)[:2000]
        )
        raise
    now = clock.now()
    ExportJob.objects.filter(pk=job.pk).update(
        status=ExportStatus.DONE,
        finished_at=now,
        expires_at=now + timedelta(hours=settings.AUDIT_EXPORT_TTL_HOURS),
        bytes_written=job.path.stat().st_size,
    )
    job.refresh_from_db()
    return job


def exports_expire(*, now: datetime | None = None) -> int:
    """Delete the files of exports past their time (beat); the job rows stay, marked expired."""
    now = now or clock.now()
    expired = 0
    for job in ExportJob.objects.filter(status=ExportStatus.DONE, expires_at__lte=now):
        job.path.unlink(missing_ok=True)
        expired += ExportJob.objects.filter(pk=job.pk, status=ExportStatus.DONE).update(
            status=ExportStatus.EXPIRED
        )
    return expired
