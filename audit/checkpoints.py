"""Signed checkpoints: recompute every chain, then sign the heads that changed since the last one.

Every chain is also compared with the head the last checkpoint signed for its run, so a chain
rewritten with recomputed hashes is caught online, not only by an offline verifier.

The job refuses to sign over a broken chain: it raises (or refreshes) a ChainAlert instead, so
an edit made behind the application's back is loud at the next checkpoint.
"""

import copy
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import connection, connections, transaction

from audit import merkle
from audit.models import ChainAlert, Checkpoint, CheckpointLeaf
from audit.signing import sign, signing_key_id
from runs import clock
from runs.canonical import GENESIS_HASH, canonical_json, sha256_hex
from runs.chain import EVENT_COLUMNS, STEP_COLUMNS, ChainBreak, EventRow, StepRow, chain_breaks
from runs.models import Event, Run, Step
from teams.scope import current as current_scope

CHECKPOINT_LOCK = 0x41554454  # pg advisory lock key: one checkpoint job at a time ("AUDT")
LEAF_BATCH = 2000


@dataclass
class ChainCheck:
    runs: int = 0
    events: int = 0
    breaks: list[ChainBreak] = field(default_factory=list)
    breaks_total: int = 0


@dataclass(frozen=True)
class CheckpointResult:
    checkpoint: Checkpoint | None
    check: ChainCheck
    refused: str = ""
    alert: ChainAlert | None = None


def repeatable_read(using: str = "default") -> None:
    """One snapshot for the whole transaction: chains, heads and leaves agree with each other.

    Only possible as the transaction's first statement; inside an outer atomic block (tests) the
    caller already sees one consistent state and nothing is changed.
    """
    conn = connections[using]
    if conn.in_atomic_block and len(conn.savepoint_ids) == 0:
        with conn.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")


def chains_verify(*, keep: int = 100) -> ChainCheck:
    """Recompute every run's chain (events streamed with a server-side cursor, run by run).

    Each run's steps are checked against its events too (runs.binding): a step row edited in
    the database is a break naming the step and the field.
    """
    check = ChainCheck()
    runs = Run.objects.order_by("pk").values_list("pk", "event_head").iterator(chunk_size=5000)
    events = (
        EventRow(*row)
        for row in Event.objects.order_by("run_id", "seq")
        .values_list(*EVENT_COLUMNS)
        .iterator(chunk_size=5000)
    )
    grouped = itertools.groupby(events, key=lambda e: e.run_id)
    pending = next(grouped, None)
    steps_by_run = itertools.groupby(
        (
            StepRow(*row)
            for row in Step.objects.order_by("run_id", "index")
            .values_list(*STEP_COLUMNS)
            .iterator(chunk_size=5000)
        ),
        key=lambda s: s.run_id,
    )
    pending_steps = next(steps_by_run, None)
    for run_id, head in runs:
        check.runs += 1
        matched = pending is not None and pending[0] == run_id
        run_events: Iterator[EventRow] = pending[1] if matched and pending else iter(())
        steps: list[StepRow] = []
        if pending_steps is not None and pending_steps[0] == run_id:
            steps = list(pending_steps[1])
            pending_steps = next(steps_by_run, None)
        counted = _counting(run_events, check)
        for problem in chain_breaks(run_id, counted, head=head or GENESIS_HASH, steps=steps):  # type: ignore[arg-type]
            check.breaks_total += 1
            if len(check.breaks) < keep:
                check.breaks.append(problem)
        if matched:
            # advance only once this run's group is consumed (groupby shares one iterator)
            pending = next(grouped, None)
    for problem in signed_heads_breaks():
        check.breaks_total += 1
        if len(check.breaks) < keep:
            check.breaks.append(problem)
    return check


def signed_heads_breaks() -> list[ChainBreak]:
    """Runs whose chain no longer holds the head a checkpoint signed for them.

    A rewrite of a whole chain with recomputed hashes (and head) verifies on its own; only the
    head signed earlier tells. For each run, the event at the seq its latest leaf signed must
    still carry that hash (the chain before it then holds too). Purged runs have no row and
    are skipped: their leaves are evidence, not live chains.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT l.run_id, l.event_seq, c.seq FROM (
                SELECT DISTINCT ON (run_id) run_id, event_seq, head, checkpoint_id
                FROM audit_checkpointleaf ORDER BY run_id, event_seq DESC) l
            JOIN runs_run r ON r.id = l.run_id
            JOIN audit_checkpoint c ON c.id = l.checkpoint_id
            LEFT JOIN runs_event e ON e.run_id = l.run_id AND e.seq = l.event_seq
            WHERE e.hash IS DISTINCT FROM l.head
            ORDER BY l.run_id
            """
        )
        return [
            ChainBreak(
                str(run_id),
                seq,
                f"event {seq} is not the one checkpoint {checkpoint} signed: the chain was "
                "rewritten",
            )
            for run_id, seq, checkpoint in cursor.fetchall()
        ]


def _counting(events: Iterator[EventRow], check: ChainCheck) -> Iterator[EventRow]:
    for event in events:
        check.events += 1
        yield event


def _alert_raise(check: ChainCheck, *, now: datetime) -> ChainAlert:
    breaks = [{"run": b.run_id, "event": b.seq, "problem": b.problem} for b in check.breaks]
    fingerprint = sha256_hex(canonical_json(breaks))
    message = (
        f"Checkpoint refused: {check.breaks_total} break(s) in the hash chains, first in run "
        f"{check.breaks[0].run_id} at event {check.breaks[0].seq} ({check.breaks[0].problem})."
    )
    with transaction.atomic():
        alert = (
            ChainAlert.objects.select_for_update()
            .filter(fingerprint=fingerprint, acknowledged_at__isnull=True)
            .first()
        )
        if alert is None:
            alert = ChainAlert.objects.create(
                fingerprint=fingerprint,
                created_at=now,
                last_seen_at=now,
                message=message,
                breaks=breaks,
            )
        else:
            alert.last_seen_at = now
            alert.times_seen += 1
            alert.save(update_fields=["last_seen_at", "times_seen"])
    return alert


def _changed_heads() -> list[tuple[UUID, int, str]]:
    """Runs whose current head no checkpoint has signed yet, ordered by run id."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT r.id, r.event_seq, r.event_head FROM runs_run r
            WHERE r.event_seq > 0 AND NOT EXISTS (
                SELECT 1 FROM audit_checkpointleaf l
                WHERE l.run_id = r.id AND l.event_seq = r.event_seq)
            ORDER BY r.id
            """
        )
        return [(row[0], row[1], row[2]) for row in cursor.fetchall()]


def checkpoint_create(*, actor: str = "system:checkpoint") -> CheckpointResult:
    """Verify every chain, then write and sign the next checkpoint (or refuse and alert)."""
    now = clock.now()
    with transaction.atomic():
        repeatable_read()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [CHECKPOINT_LOCK])
            locked = cursor.fetchone()[0]
        if not locked:
            return CheckpointResult(None, ChainCheck(), refused="another checkpoint is running")
        check = chains_verify()
        if not check.breaks_total:
            checkpoint = _checkpoint_write(check, actor=actor, now=now)
    if check.breaks_total:
        alert = _alert_raise(check, now=now)
        return CheckpointResult(None, check, refused=alert.message, alert=alert)
    return CheckpointResult(checkpoint, check)


def _checkpoint_write(check: ChainCheck, *, actor: str, now: datetime) -> Checkpoint:
    heads = _changed_heads()
    leaves = [
        merkle.leaf_hash(run_id=str(run_id), seq=seq, head=head) for run_id, seq, head in heads
    ]
    levels = merkle.tree_levels(leaves)
    previous = Checkpoint.objects.order_by("-seq").first()
    seq = previous.seq + 1 if previous else 1
    prev = previous.hash if previous else GENESIS_HASH
    root = merkle.tree_root(levels)
    key_id = signing_key_id()
    statement = {
        "version": 1,
        "seq": seq,
        "prev": prev,
        "at": now.isoformat(),
        "root": root,
        "leaves": len(leaves),
        "runs": check.runs,
        "events": check.events,
        "key_id": key_id,
    }
    checkpoint = Checkpoint.objects.create(
        seq=seq,
        created_at=now,
        prev_hash=prev,
        hash=hashlib.sha256(canonical_json(statement)).hexdigest(),
        root=root,
        leaves=len(leaves),
        runs_verified=check.runs,
        events_verified=check.events,
        key_id=key_id,
        statement=statement,
        signature=sign(statement),
        created_by=actor,
    )
    for start in range(0, len(heads), LEAF_BATCH):
        CheckpointLeaf.objects.bulk_create(
            CheckpointLeaf(
                checkpoint=checkpoint,
                run_id=run_id,
                event_seq=seq,
                head=head,
                position=position,
                path=b"".join(merkle.inclusion_path(levels, position)),
            )
            for position, (run_id, seq, head) in enumerate(
                heads[start : start + LEAF_BATCH], start=start
            )
        )
    return checkpoint


def alerts_seen(alerts: Any) -> list[ChainAlert]:
    """The chain alerts as the current scope may see them (teams.scope). An alert is one row for
    every team (one chain of trust), but its breaks name runs: under a scope that does not see
    every team, an alert shows only the breaks of runs the scope sees (its message retold from
    them), and an alert with none is not shown at all, as if there were none. The alerts given
    are not changed (the shown ones are copies, never saved)."""
    alerts = list(alerts)
    if current_scope().every:
        return alerts
    named = {str(b.get("run")) for alert in alerts for b in alert.breaks if b.get("run")}
    visible = {str(pk) for pk in Run.objects.filter(pk__in=named).values_list("pk", flat=True)}
    shown = []
    for alert in alerts:
        breaks = [b for b in alert.breaks if str(b.get("run")) in visible]
        if not breaks:
            continue
        seen = copy.copy(alert)
        seen.breaks = breaks
        if len(breaks) < len(alert.breaks):
            first = breaks[0]
            seen.message = (
                f"Checkpoint refused: {len(breaks)} break(s) in the hash chains of your teams' "
                f"runs, first in run {first.get('run')} at event {first.get('event')} "
                f"({first.get('problem')})."
            )
        shown.append(seen)
    return shown


def alert_acknowledge(*, alert_id: int, user: Any, note: str) -> ChainAlert:
    """An admin takes note of an alert (what was found, what was done); audited. An alert the
    current scope does not see (alerts_seen) is not found; one that also names runs of teams it
    does not see is for an org admin to acknowledge."""
    from dashboard.audit import audit_record
    from runs.api_errors import ApplicationError, note_required

    note_required(note)
    with transaction.atomic():
        alert = ChainAlert.objects.select_for_update().filter(pk=alert_id).first()
        seen = alerts_seen([alert]) if alert is not None else []
        if alert is None or not seen:
            raise ApplicationError("not_found", f"No alert {alert_id}.", status_code=404)
        if len(seen[0].breaks) < len(alert.breaks):
            raise ApplicationError(
                "conflict",
                "This alert also names runs of other teams: an org admin acknowledges it.",
                status_code=409,
            )
        if alert.acknowledged_at is None:
            alert.acknowledged_at = clock.now()
            alert.acknowledged_by = user.get_username()
            alert.acknowledged_note = note.strip()
            alert.save()
            audit_record(
                actor=user,
                action="audit.alert_acknowledge",
                target=f"alert:{alert.pk}",
                note=note,
                details={"message": alert.message, "breaks": alert.breaks[:20]},
            )
        return alert
