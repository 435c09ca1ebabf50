"""Reads for the dashboard pages: bounded, index-friendly queries (see the partial indexes in runs)."""

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, TextField
from django.db.models.fields.json import KT, KeyTextTransform
from django.db.models.functions import Cast

from runs.constants import FINAL_STATUSES, EventType, RunRunner, RunStatus, StatusReason, StepState
from runs.models import Event, Run, Step
from teams.scope import visible_team_ids


def review_runs_without_unknown() -> QuerySet[Run]:
    """Runs in review with no unknown step (a crash loop: the recovery budget is spent).

    The journal sends a run to review with reason "unknown_step" exactly when it has unknown
    steps (and resumes or abandons it when the last one is resolved), so the other reasons
    narrow the scan to a handful of rows; the EXISTS probe (step_index_unique_per_run) keeps
    the answer exact even so.
    """
    unknown = Step.objects.filter(run=OuterRef("pk"), state=StepState.UNKNOWN)
    return (
        Run.objects.filter(status=RunStatus.NEEDS_REVIEW)
        .exclude(status_reason=StatusReason.UNKNOWN_STEP)
        .exclude(Exists(unknown))
    )


DESK_STATES = (StepState.UNKNOWN, StepState.AWAITING_APPROVAL)


def waiting_count() -> int:
    """Unknown steps (step_unknown_idx), steps awaiting approval (step_awaiting_approval_idx),
    plus runs in review with no unknown step (crash loops)."""
    return (
        Step.objects.filter(state__in=DESK_STATES).count() + review_runs_without_unknown().count()
    )


# --- runs list ----------------------------------------------------------------------------------

PAGE_SIZE = 25


@dataclass
class RunFilters:
    status: str = ""
    agent: str = ""
    date_from: date | None = None
    date_to: date | None = None
    has_unknown: bool = False
    over_80: bool = False
    legal_hold: bool = False
    q: str = ""


def _over_80() -> Q:
    """Any budget at 80 % or more, in integer arithmetic so no row is cast."""
    return (
        Q(used_steps__gte=F("limit_steps") * 4 / 5)
        | Q(used_tokens__gte=F("limit_tokens") * 4 / 5)
        | Q(limit_cost_usd__isnull=False, used_cost_usd__gte=F("limit_cost_usd") * 0.8)
        | Q(limit_recoveries__gt=0, used_recoveries__gte=F("limit_recoveries") * 4 / 5)
    )


_HEX_PREFIX = re.compile(r"^[0-9a-fA-F-]{4,36}$")


def _search(q: str) -> Q:
    """A whole id; the short id the list shows (a prefix, run_id_text_prefix_idx); part of an
    external id such as the ticket `T-1004` (run_external_id_trgm_idx); part of the customer's
    address in the run's input, `customer` or the inbound ticket's `ticket.customer`
    (run_customer_trgm_idx, run_ticket_customer_trgm_idx). Upper-cased like the indexes."""
    try:
        return Q(pk=uuid.UUID(q))
    except ValueError:
        pass
    found = Q(external_id__icontains=q) | Q(customer__icontains=q) | Q(ticket_customer__icontains=q)
    if _HEX_PREFIX.match(q):
        found |= Q(id_text__startswith=q.lower())
    return found


def _scope_runs() -> QuerySet[Run]:
    """Runs of the scope's teams, said in the query as the policy says it: a condition that is
    not leakproof (a search's ILIKE) cannot use an index under the policy, nor can the policy's
    own condition, so without it a page scans every team's runs (teams.visible_team_ids)."""
    teams = visible_team_ids()
    return Run.objects.all() if teams is None else Run.objects.filter(team_id__in=teams)


def runs_filtered(filters: RunFilters) -> QuerySet[Run]:
    """The runs list query: every filter maps onto one of the runs indexes, newest first."""
    qs = _scope_runs().annotate(
        id_text=Cast("id", output_field=TextField()),
        customer=KeyTextTransform("customer", "input"),
        ticket_customer=KT("input__ticket__customer"),
    )
    if filters.q:
        qs = qs.filter(_search(filters.q.strip()))
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.agent:
        qs = qs.filter(agent=filters.agent)
    if filters.date_from:
        qs = qs.filter(created_at__gte=datetime.combine(filters.date_from, time.min, tzinfo=UTC))
    if filters.date_to:
        qs = qs.filter(
            created_at__lt=datetime.combine(
                filters.date_to + timedelta(days=1), time.min, tzinfo=UTC
            )
        )
    if filters.has_unknown:
        # step_unknown_idx: the few unknown steps name their runs
        qs = qs.filter(pk__in=Step.objects.filter(state=StepState.UNKNOWN).values("run_id"))
    if filters.over_80:
        qs = qs.filter(_over_80())
    if filters.legal_hold:
        qs = qs.filter(legal_hold=True)  # run_legal_hold_idx
    return qs.order_by("-created_at")


def runs_page(filters: RunFilters, *, page: int) -> tuple[list[Run], bool]:
    """One page without COUNT(*): fetch one row more than shown to know if there is a next."""
    offset = (max(page, 1) - 1) * PAGE_SIZE
    rows = list(runs_filtered(filters)[offset : offset + PAGE_SIZE + 1])
    return rows[:PAGE_SIZE], len(rows) > PAGE_SIZE


STATUS_COUNT_CAP = 10_000


def run_status_counts() -> dict[str, int]:
    """Runs per status, each count capped (shown as "10000+"): one query, bounded work.

    Each status is counted over at most CAP+1 entries of run_status_created_idx, so the header
    costs the same at 100,000 runs as at 100 million, and never a COUNT(*) of the whole table.
    """
    parts: list[str] = []
    params: list[Any] = []
    runs = _scope_runs()
    for status in RunStatus.values:
        sub = runs.filter(status=status).order_by().values("pk")[: STATUS_COUNT_CAP + 1]
        sql, sub_params = sub.query.sql_with_params()
        # Django-compiled SQL; every value is a bound parameter
        parts.append(f"SELECT %s, (SELECT count(*) FROM ({sql}) AS capped)")  # noqa: S608
        params.extend([status, *sub_params])
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        return {status: int(n) for status, n in cursor.fetchall()}


def run_agents() -> list[str]:
    """Agents with a policy or a recent run, for the filter's choices (bounded, indexed)."""
    from runs.models import BudgetPolicy

    names = set(BudgetPolicy.objects.exclude(agent=None).values_list("agent", flat=True)) | set(
        Run.objects.order_by("-created_at").values_list("agent", flat=True)[:500]
    )
    return sorted(n for n in names if n)


def runs_unknown_counts(run_ids: list[Any]) -> dict[Any, int]:
    rows = (
        Step.objects.filter(state=StepState.UNKNOWN, run_id__in=run_ids)
        .values("run_id")
        .annotate(n=Count("pk"))
    )
    return {r["run_id"]: r["n"] for r in rows}


# --- review queue ----------------------------------------------------------------------------


QUEUE_PAGE = 50


def queue_steps(*, limit: int = QUEUE_PAGE) -> list[Step]:
    """Unknown steps and steps awaiting approval, oldest first, with their run, claimant and
    approval request (the two partial indexes on intent_at)."""
    return list(
        Step.objects.filter(state__in=DESK_STATES)
        .select_related("run", "claimed_by")
        .prefetch_related("approval_requests")
        .order_by("intent_at", "pk")[:limit]
    )


def item_columns(step: Step) -> dict[str, Any]:
    """The customer, ticket and external id a queue row shows.

    The ticket is the one the run works on (its input's, such as `T-1005`); a help-desk ticket
    the step's arguments name (`ticket_id`, a number the agent's own tickets.create made) is
    shown apart and labelled, and an external id that only repeats the ticket is left out, so
    a row names each identifier once and says which is which."""
    args = step.arguments if isinstance(step.arguments, dict) else {}
    run_input = step.run.input if isinstance(step.run.input, dict) else {}
    ticket_in = run_input.get("ticket")
    inbound: dict[str, Any] = ticket_in if isinstance(ticket_in, dict) else {}
    customer = (
        args.get("to")
        or args.get("customer")
        or run_input.get("customer")
        or inbound.get("customer")
        or ""
    )
    ticket = str(inbound.get("id") or run_input.get("ticket_id") or "")[:60]
    desk = str(args.get("ticket_id") or "")[:60]
    external_id = step.run.external_id or ""
    return {
        "customer": str(customer)[:120],
        "ticket": ticket,
        "desk_ticket": desk if desk != ticket else "",
        "external_id": ""
        if ticket and external_id in (ticket, f"ticket:{ticket}")
        else external_id,
    }


def people_who_decide(team_id: int | None = None) -> list[Any]:
    """Active users who may resolve items (supervisors and admins), for assigning."""

    from teams.services import resolvers_in

    return list(resolvers_in(team_id).order_by("username"))


def webhooks_with_last_delivery() -> list[Any]:
    """Every escalation webhook, oldest first, each with `last` (its latest delivery or None)."""
    from review.models import EscalationWebhook, WebhookDelivery

    webhooks = list(EscalationWebhook.objects.order_by("created_at"))
    latest = (
        WebhookDelivery.objects.filter(webhook_id__in=[w.pk for w in webhooks])
        .order_by("webhook_id", "-created_at", "-pk")
        .distinct("webhook_id")
    )
    by_webhook = {delivery.webhook_id: delivery for delivery in latest}
    for webhook in webhooks:
        webhook.last = by_webhook.get(webhook.pk)  # type: ignore[attr-defined]
    return webhooks


def supervisors_with_mail() -> list[Any]:
    from django.contrib.auth import get_user_model

    return list(
        get_user_model()
        ._default_manager.filter(is_active=True, team_roles__role="supervisor")
        .distinct()
        .exclude(email="")
        .order_by("username")
    )


def queue_review_runs(*, limit: int = QUEUE_PAGE) -> list[Run]:
    return list(review_runs_without_unknown().order_by("updated_at")[:limit])


def sla_level(waited_seconds: float, sla: int) -> str:
    if waited_seconds >= sla:
        return "late"
    if waited_seconds >= sla / 2:
        return "warn"
    return "ok"


# --- transcript ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryLine:
    at: datetime
    text: str
    kind: str


class _Payload(dict[str, Any]):
    """An event's payload for str.format_map: a key it lacks reads as None, as .get() would."""

    def __missing__(self, key: str) -> None:
        return None


# What each event type says in a run's history ({key} is read from the event's payload), and
# the kind of line it is.
HISTORY_WORDS: dict[str, tuple[str, str]] = {
    EventType.LEASE_EXPIRED: ("lease lost at step {at_step}, worker {worker}", "lost"),
    EventType.NEEDS_REVIEW: ("sent to review ({reason})", "review"),
    EventType.STEP_RESOLVED: ("step {index} resolved as {action} by {by}: {note}", "resolved"),
    EventType.RUN_RESUMED: ("resumed ({why})", "resumed"),
    EventType.RECONCILED: (
        "step {index} reconciled from the tool side (key {key_state})",
        EventType.RECONCILED,
    ),
    EventType.LIMITS_RAISED: ("limits raised by {by}: {note}", "limits"),
    EventType.BUDGET_EXCEEDED: ("budget exceeded: {limit}", "budget"),
    EventType.RUN_CANCELLED: ("cancelled by {by}: {note}", "final"),
    EventType.RUN_FORKED: ("forked at step {index} by {by}: {note}", "fork"),
    EventType.RUN_LEGAL_HOLD_SET: ("put on legal hold by {by}: {note}", "hold"),
    EventType.RUN_LEGAL_HOLD_LIFTED: ("hold lifted by {by}: {note}", "hold"),
    EventType.RUN_COMPLETED: ("run completed", "final"),
    EventType.RUN_FAILED: ("run failed", "final"),
    EventType.RUN_ABANDONED: ("run abandoned", "final"),
}


def run_history(events: list[Event]) -> list[HistoryLine]:
    """Lease and recovery history in words, read from the run's own events."""
    lines: list[HistoryLine] = []
    replays = iter(_replayed_by_lease(events))
    for e in events:
        p = _Payload(e.payload or {})
        if e.type == EventType.LEASE_ACQUIRED:
            replayed = next(replays)
            took = "recovered" if p.get("recovery") else "leased"
            text = f"{took} by {p['worker']} (epoch {p['epoch']})"
            if p.get("recovery") or replayed:
                text += f"; {replayed} step{'' if replayed == 1 else 's'} replayed"
            lines.append(HistoryLine(e.at, text, "lease"))
        elif e.type in HISTORY_WORDS:
            words, kind = HISTORY_WORDS[e.type]
            lines.append(HistoryLine(e.at, words.format_map(p), kind))
    return lines


def _replayed_by_lease(events: list[Event]) -> list[int]:
    """Steps each lease's holder replays from the journal: every step recorded before a recovery
    or a resume after review alike; none for the run's first lease."""
    leases = [e for e in events if e.type == EventType.LEASE_ACQUIRED]
    return [
        int((e.payload or {}).get("replayable_steps", 0))
        if n or (e.payload or {}).get("recovery")
        else 0
        for n, e in enumerate(leases)
    ]


def duplicates_prevented(events: list[Event], replays_by_key: int) -> dict[str, int]:
    """Work the ledger stopped from happening twice: replayed steps, reconciled keys, tool replays."""
    replayed = sum(_replayed_by_lease(events))
    reconciled = sum(1 for e in events if e.type == EventType.RECONCILED)
    return {
        "replayed_steps": replayed,
        "reconciled": reconciled,
        "tool_replays": replays_by_key,
        "total": replayed + reconciled + replays_by_key,
    }


def run_resumed_by(run: Run) -> str:
    """Who takes the run up after a decision, truthfully: a worker that holds it, the ledger's
    Celery workers (runner `celery`), or only its own process (runner `external`: the ledger
    never starts it; runs.services._shared._offer_on_commit)."""
    if run.status in FINAL_STATUSES or run.status == RunStatus.BUDGET_EXCEEDED:
        return f"The run is {run.status}: nothing more runs."
    if run.lease_worker:
        return f"Worker {run.lease_worker} holds the run now."
    if run.status == RunStatus.NEEDS_REVIEW:
        return "The run waits for its other items to be decided."
    if run.runner == RunRunner.CELERY:
        return "A Celery worker of the ledger takes it up: the run is offered to them now."
    last = (
        Event.objects.filter(run=run, type=EventType.LEASE_ACQUIRED)
        .order_by("-seq")
        .values_list("payload__worker", flat=True)
        .first()
    )
    own = f"its own worker process ({last})" if last else "its own worker process"
    return (
        f"Nobody in the ledger resumes this run: it is run by {own}, and it goes on only when "
        "that process, or the deployment that restarts it, attaches to it again. Until then "
        "it waits without a worker, and its wall-clock budget keeps running."
    )
