"""Creating a run: its policy's limits copied in, its `run_created` event, attach by external id.

Locks: none taken and none needed; the caller holds no lock on any run. A duplicate
(agent, external_id) is settled by the unique constraint, not by a lock.
"""

from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction

from runs import clock
from runs.canonical import GENESIS_HASH
from runs.constants import EventType, RunRunner
from runs.kernel import event_append
from runs.models import Run
from runs.services.budgets import budget_of, budget_policy_for, limits_copied
from teams.scope import home_team_id
from traces.context import TraceParent


def run_create(
    *,
    agent: str,
    input: Any,
    external_id: str | None = None,
    actor: str,
    runner: str = RunRunner.EXTERNAL,
    trace_parent: TraceParent | None = None,
    team_id: int | None = None,
) -> tuple[Run, bool]:
    """Create a run with its policy's limits copied in; the same (agent, external_id) attaches.

    `runner`: `celery` for runs the agents' Celery task runs (re-dispatched by the reaper and the
    idle sweep), `external` for every other caller (resumed only by its own process).
    `trace_parent`: the creator's span (W3C trace context): the run's trace is that span's, its
    span a child of it (traces/); kept on the run, read by the trace exporter only.
    `team_id`: the run's team; by default the one the transaction names (a worker call's: its
    token's team). An external id attaches within the team only.
    """
    if team_id is None:
        team_id = home_team_id()
    if team_id is None:  # every worker call runs under its token's team: a caller's bug
        raise RuntimeError("run_create: a run belongs to one team, and the scope names none")
    if external_id is not None:
        existing = Run.objects.filter(team_id=team_id, agent=agent, external_id=external_id).first()
        if existing is not None:
            return existing, False
    policy = budget_policy_for(agent, team_id=team_id)
    limits = limits_copied(policy, "max_")
    now = clock.now()
    try:
        with transaction.atomic():
            run = Run(
                team_id=team_id,
                agent=agent,
                external_id=external_id,
                input=input,
                runner=runner,
                policy=policy,
                **limits,
                deadline=now + timedelta(seconds=limits["limit_wall_seconds"]),
                event_head=GENESIS_HASH,
                trace_id=trace_parent.trace_id if trace_parent else None,
                trace_parent_span_id=trace_parent.span_id if trace_parent else None,
            )
            run.save(force_insert=True)
            event_append(
                run,
                type=EventType.RUN_CREATED,
                payload={
                    "agent": agent,
                    "external_id": external_id,
                    "policy": policy.name if policy else None,
                    "limits": budget_of(run)["limits"],
                    "runner": runner,
                },
                actor=actor,
                at=now,
            )
            run.save(update_fields=["event_seq", "event_head"])
    except IntegrityError:
        existing = Run.objects.filter(team_id=team_id, agent=agent, external_id=external_id).first()
        if existing is None:
            raise
        return existing, False
    return run, True
