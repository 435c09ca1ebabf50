"""Forks: a new run that copies the first steps of another, with fences on the tools whose
writes the original already made.

Locks: the caller holds no lock; `run_fork` takes the original run's row lock through
`kernel.transition` (the fork is a new row nobody else sees before the commit).
"""

from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from runs import clock
from runs.api_errors import ApplicationError, invalid, note_required
from runs.canonical import GENESIS_HASH, arguments_hash
from runs.constants import EventType, ForkWrite, StepState
from runs.kernel import event_append, transition
from runs.models import ApprovalRule, ForkFence, Run, Step
from runs.representations import step_json
from runs.selectors import fork_writes_after
from runs.services._shared import _resumable_on_commit
from runs.services.budgets import budget_of, limits_copied

COPYABLE_STEP_STATES = frozenset({StepState.DONE, StepState.ERROR})


def run_fork(
    *,
    run_id: UUID | str,
    index: int,
    by: str,
    note: str,
    writes: Mapping[str, str] | None = None,
) -> Run:
    """A new run whose journal is the original's first `index` steps: "what if it had gone on".

    The original's writes from `index` on (runs.selectors.fork_writes_after) were made once
    already; the fork's own steps get new keys, so going on would make them again. `writes`
    must name a ForkWrite for each such tool, or the fork is refused (`fork_writes_unchosen`,
    with the tools): `hold` fences the tool in the fork (a ForkFence the kernel reads,
    runs/sql/ledger.sql: each write of it waits on the desk), `again` lets it run.
    The choices are in the fork's `run_created` event.

    The copies keep their results and idempotency keys, so a worker on the fork replays them
    from the journal and the tool side answers their keys from its store: no write runs twice.
    Each copy is bound by a `step_copied` event in the fork's chain (runs.binding); the fork's
    `run_created` names its origin and the original gets a `run_forked` event naming the fork.
    The fork starts `pending` with the original's limits, the copied steps' usage already spent
    (budgets belong to the run: a fork cannot buy a second budget) and a fresh deadline.
    Only steps with a recorded outcome (done or error) can be copied.
    """
    note = note_required(note)
    with transition(run_id, actor=f"user:{by}") as t:
        original = t.run
        if not 0 <= index <= original.step_count:
            raise ApplicationError(
                "validation_error",
                f"A fork copies 0 to {original.step_count} steps of this run, not {index}.",
                status_code=400,
                details={"index": [f"Between 0 and {original.step_count}."]},
            )
        steps = list(Step.objects.filter(run=original, index__lt=index).order_by("index"))
        for step in steps:
            if step.state not in COPYABLE_STEP_STATES:
                raise ApplicationError(
                    "fork_step_open",
                    f"Step {step.index} is {step.state}: a fork copies only steps with a "
                    "recorded outcome; fork from an earlier step or resolve it first.",
                    details={"index": step.index, "state": step.state},
                )
        choices = _fork_write_choices(run_id=original.pk, index=index, writes=writes or {})
        now = clock.now()
        fork = Run(
            team_id=original.team_id,  # a fork stays in its original's team
            agent=original.agent,
            external_id=None,
            input=original.input,
            policy=original.policy,
            **limits_copied(original, "limit_"),
            used_steps=len(steps),
            used_tokens=sum(s.usage_input_tokens + s.usage_output_tokens for s in steps),
            used_cost_usd=sum((s.usage_cost_usd for s in steps), Decimal(0)),
            step_count=len(steps),
            deadline=now + timedelta(seconds=original.limit_wall_seconds),
            event_head=GENESIS_HASH,
            forked_from=original,
            forked_from_index=index,
        )
        fork.save(force_insert=True)
        actor = f"user:{by}"
        event_append(
            fork,
            type=EventType.RUN_CREATED,
            payload={
                "agent": fork.agent,
                "external_id": None,
                "policy": original.policy.name if original.policy else None,
                "limits": budget_of(fork)["limits"],
                "forked_from": {"run_id": str(original.pk), "index": index},
                "by": by,
                "note": note,
                **({"writes_after_fork": choices} if choices else {}),
            },
            actor=actor,
            at=now,
        )
        held = [name for name, choice in choices.items() if choice == ForkWrite.HOLD]
        if held:
            fork_fence_rule(team_id=fork.team_id)
            ForkFence.objects.bulk_create(
                ForkFence(run=fork, tool=name, created_by=by) for name in held
            )
        copies = [_step_copy(fork, step) for step in steps]
        Step.objects.bulk_create(copies)
        for copy in copies:
            event_append(
                fork, type=EventType.STEP_COPIED, payload=_copied_payload(copy), actor=actor, at=now
            )
        fork.save()
        event_append(
            original,
            type=EventType.RUN_FORKED,
            payload={"fork_run_id": str(fork.pk), "index": index, "by": by, "note": note},
            actor=actor,
            at=now,
        )
        _resumable_on_commit(fork, reason="forked")
        return fork


def fork_fence_rule(*, team_id: int) -> ApprovalRule:
    """The team's one approval rule a fork's held write waits under (never active by itself:
    the kernel names it only for a write a ForkFence holds), made when first needed."""
    rule, _ = ApprovalRule.objects.get_or_create(
        is_fork_fence=True,
        team_id=team_id,
        defaults={
            "agent": "",
            "tool_pattern": "(a fork's fence)",
            "approvals_required": 1,
            "active": False,
            "created_by": "system",
        },
    )
    return rule


def _fork_write_choices(
    *, run_id: UUID | str, index: int, writes: Mapping[str, str]
) -> dict[str, str]:
    """The choice for each tool the original wrote with from `index` on; refused unless every
    such tool has one (and only those)."""
    made = fork_writes_after(run_id=run_id, index=index)
    names = {w.name for w in made}
    bad = {n: c for n, c in writes.items() if n not in names or c not in ForkWrite.values}
    if bad:
        raise invalid(
            "writes",
            "Choose hold or again, only for the tools the original wrote with after the fork "
            "point.",
            f"Not a choice here: {', '.join(sorted(bad))}.",
        )
    missing = [w for w in made if w.name not in writes]
    if missing:
        said = "; ".join(
            f"{w.name} (step{'s' if len(w.steps) > 1 else ''} "
            + ", ".join(f"{i} {state}" for i, state in w.steps)
            + ")"
            for w in missing
        )
        raise ApplicationError(
            "fork_writes_unchosen",
            f"The original already wrote from step {index} on: {said}. A fork that goes on "
            "would write again under new keys: choose, per tool, to hold its writes for a "
            "person's approval or to run them again.",
            details={"tools": {w.name: [i for i, _ in w.steps] for w in missing}},
        )
    return {name: writes[name] for name in sorted(names)}


# What a fork's copy of a step keeps of the original: all it recorded (its key and result too)
COPIED_STEP_FIELDS = (
    "index",
    "kind",
    "name",
    "effect",
    "enforced_by",
    "arguments",
    "arguments_hash",
    "idempotency_key",
    "state",
    "result",
    "usage_input_tokens",
    "usage_output_tokens",
    "usage_cost_usd",
    "intent_at",
    "outcome_at",
    "resolution_action",
    "resolution_by",
    "resolution_note",
    "resolution_at",
)


def _step_copy(fork: Run, step: Step) -> Step:
    """The original's step as the fork's: same key and result, never executed in the fork."""
    copied = {name: getattr(step, name) for name in COPIED_STEP_FIELDS}
    return Step(run=fork, journal_month=fork.journal_month, epoch=0, executions=0, **copied)


def _copied_payload(step: Step) -> dict[str, Any]:
    """Binds every field of a copied step, as step_intent + step_done (+ step_resolved) would:
    the step as the API shows it (the shape runs.binding compares), with its arguments and
    result by their hashes and without the epoch and times the fork gives it."""
    shown = step_json(step)
    for own in ("arguments", "result", "epoch", "intent_at", "outcome_at"):
        del shown[own]
    return {**shown, "result_hash": arguments_hash(step.result)}
