"""What a review item's page says happened, in plain words, from the journal and the tool side.

A supervisor should not have to translate states and keys: every case gets a sentence saying
what the worker was doing, what is known and what to check; the tool side is worded for who
enforces the tool (a tool the ledger cannot see into is never reported as "absent", which reads
as "not sent"); the worker, epoch and last sign of life come from the run's events; and the
last decisions people took on the same tool sit beside it.
"""

from dataclasses import dataclass, field
from datetime import datetime

from review.toolside import KeyInfo
from runs.constants import EnforcedBy, EventType, StepState
from runs.models import Event, Step

# what a tool does, said as "while <doing> ..."; "it" is what the customer would get
_DOING: dict[str, tuple[str, str, str]] = {
    # name: (doing, what "it" is, where to check)
    "email.send": ("sending this email", "the customer got it", "the mailbox or the provider"),
    "tickets.create": ("creating this ticket", "the ticket exists", "the ticket system"),
    "tickets.comment": ("commenting on this ticket", "the comment exists", "the ticket"),
    "tickets.close": ("closing this ticket", "the ticket is closed", "the ticket"),
}


def _doing(name: str) -> tuple[str, str, str]:
    return _DOING.get(
        name,
        (f"running {name}", "it took effect", "the system this tool acts on"),
    )


@dataclass(frozen=True)
class Evidence:
    summary: str  # what happened, what is known, what to check
    tool_side: str  # what the tool side knows, worded for who enforces the tool
    worker: str  # the worker, its epoch and its last sign of life
    similar: list[Step] = field(default_factory=list)


def tool_side_words(step: Step, key: KeyInfo | None) -> str:
    if step.effect != "write":
        return "A read step: it has no effect outside the agent."
    if step.enforced_by == EnforcedBy.NOBODY:
        return (
            "The ledger cannot see into this tool (enforced by nobody): it keeps no record "
            "of whether the tool ran, so there is nothing to look up here."
        )
    if step.enforced_by == EnforcedBy.TOOL:
        return (
            "The tool deduplicates this key itself; its records are not in the ledger. "
            "A retry with the same key is safe if the tool honours it."
        )
    if key is None or key.state == "unavailable":
        return "The ledger's gateway has no record store here."
    if key.state == "absent":
        return "The gateway has no record of this key: the tool never started under it."
    if key.state == "in_progress":
        since = f" since {key.locked_at:%H:%M:%S} UTC" if key.locked_at else ""
        return (
            f"The gateway started the tool under this key{since} and never heard back: "
            "it may have completed."
        )
    if key.state == "completed":
        return "The gateway recorded this key as completed: the tool ran once."
    if key.state == "failed":
        return "The gateway recorded this key as failed: the tool reported an error."
    return f"The gateway's record of this key is {key.state}."


def summary_words(step: Step) -> str:
    doing, happened, where = _doing(step.name)
    if step.state == StepState.AWAITING_APPROVAL:
        return (
            f"Nothing has happened yet. The agent asks before {doing}: it runs only "
            "after people approve it here, and never if it is denied."
        )
    if step.state == StepState.UNKNOWN:
        if step.enforced_by == EnforcedBy.NOBODY:
            return (
                f"Maybe sent. The worker stopped while {doing}. The ledger cannot see into "
                f"this tool, so nobody knows whether {happened}. Check {where}, then decide."
            )
        return (
            f"Maybe sent. The worker stopped while {doing}, and the tool side cannot say "
            f"whether it finished. Check {where}, then decide."
        )
    if step.state == StepState.DENIED:
        return "Denied before it ran: the tool was never called for this step."
    return f"This step is {step.state}."


def worker_words(step: Step, events: list[Event]) -> str:
    """Who held the step, under which epoch, and the last sign of life the journal has."""
    worker, lost_at, lease_until = None, None, None
    for e in events:
        p = e.payload or {}
        if e.type == EventType.LEASE_ACQUIRED and p.get("epoch") == step.epoch:
            worker = p.get("worker")
            lease_until = p.get("expires_at")
        elif e.type == EventType.LEASE_EXPIRED and worker is not None and lost_at is None:
            lost_at = e.at
    who = f"Worker {worker}" if worker else "The worker"
    text = f"{who} held epoch {step.epoch} and journalled the intent at {_t(step.intent_at)}."
    if lost_at is not None:
        text += f" Its lease ran out at {_t(lost_at)} (no heartbeat after that)."
    elif lease_until:
        text += f" Its lease ran until {lease_until[11:19]} UTC unless renewed by heartbeats."
    return text


def _t(value: datetime) -> str:
    return f"{value:%H:%M:%S} UTC"


def similar_decisions(step: Step, *, limit: int = 5) -> list[Step]:
    """The latest decided steps of the same tool (other runs included), newest first."""
    return list(
        Step.objects.filter(name=step.name, resolution_action__isnull=False)
        .exclude(pk=step.pk)
        .order_by("-resolution_at")[:limit]
    )


def step_evidence(step: Step, key: KeyInfo | None) -> Evidence:
    events = list(
        Event.objects.filter(
            run_id=step.run_id, type__in=(EventType.LEASE_ACQUIRED, EventType.LEASE_EXPIRED)
        ).order_by("seq")
    )
    return Evidence(
        summary=summary_words(step),
        tool_side=tool_side_words(step, key),
        worker=worker_words(step, events),
        similar=similar_decisions(step),
    )
