"""Escalation of desk items waiting longer than the SLA: one mail (and webhook post) per item.

Lock precondition: none held by the caller, and no transaction open: each item's Escalation row
and its notices commit in a transaction of their own, and the unique constraint on the row
(not a lock) keeps two beats from escalating the same item twice.
"""

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import IntegrityError, transaction

from review.models import Escalation, EscalationWebhook
from review.services.webhooks import slack_escaped, webhooks_notify
from runs import clock
from runs.constants import FINAL_STATUSES, RunStatus, StepState
from runs.models import Run, Step
from teams.models import Role, Team


def sla_seconds(team: Team | None = None) -> int:
    """How long an item may wait before it is escalated: its team's SLA, else
    REVIEW_SLA_SECONDS."""
    if team is not None and team.review_sla_minutes:
        return team.review_sla_minutes * 60
    return int(getattr(settings, "REVIEW_SLA_SECONDS", 15 * 60))


def team_slas() -> dict[int, int]:
    """Each team's SLA in seconds, by team id (the queue colours each item by its own team's)."""
    return {team.pk: sla_seconds(team) for team in Team.objects.all()}


def escalation_reachable() -> bool:
    """Can an escalation reach anyone: a supervisor with an address, or an active webhook?"""
    if Team.objects.exclude(escalation_email="").exists():
        return True
    has_address = (
        get_user_model()
        ._default_manager.filter(is_active=True, team_roles__role=Role.SUPERVISOR)
        .exclude(email="")
        .exists()
    )
    return has_address or EscalationWebhook.objects.filter(active=True).exists()


def _waiting_as(step: Step) -> str:
    """What a desk step waits for, in the escalation's words."""
    if step.state == StepState.AWAITING_APPROVAL:
        return "waiting for approval (nothing has run yet)"
    return "unknown (it may or may not have happened)"


class _Reach:
    """Who an item of each team is escalated to: the team's active supervisors with an address,
    and the team's active webhooks (read once a team per sweep)."""

    def __init__(self) -> None:
        self._teams: dict[int, tuple[list[str], list[EscalationWebhook]]] = {}

    def anyone(self) -> bool:
        return escalation_reachable()

    def of(self, team_id: int) -> tuple[list[str], list[EscalationWebhook]]:
        if team_id not in self._teams:
            team_address = (
                Team.objects.filter(pk=team_id).values_list("escalation_email", flat=True).first()
            )
            addresses = (
                [team_address]
                if team_address
                else (
                    get_user_model()
                    ._default_manager.filter(
                        is_active=True,
                        team_roles__team_id=team_id,
                        team_roles__role=Role.SUPERVISOR,
                    )
                    .exclude(email="")
                    .values_list("email", flat=True)
                )
            )
            self._teams[team_id] = (
                sorted(set(addresses)),
                list(EscalationWebhook.objects.filter(active=True, team_id=team_id)),
            )
        return self._teams[team_id]


def review_items_escalate(*, limit: int = 200) -> int:
    """Mail the supervisors of the item's team once per item waiting longer than the SLA (and
    post to the team's webhooks); returns mails sent.

    The Escalation row is inserted in the same transaction as the send: a failed send rolls it
    back (retried on the next beat), and the unique constraint stops a second mail for an item.
    """
    now = clock.now()
    slas = team_slas()
    # the shortest SLA bounds the query; each item is then held to its own team's
    cutoff = now - timedelta(seconds=min(slas.values(), default=sla_seconds()))
    reach = _Reach()
    if not reach.anyone():
        return 0  # the queue page shows a banner: nobody can be notified
    base = settings.LEDGER_DASHBOARD_URL.rstrip("/")
    steps = list(
        Step.objects.filter(
            state__in=(StepState.UNKNOWN, StepState.AWAITING_APPROVAL), intent_at__lt=cutoff
        )
        # an approval in a finished run can no longer be decided: nobody is asked to
        .exclude(state=StepState.AWAITING_APPROVAL, run__status__in=FINAL_STATUSES)
        .exclude(pk__in=Escalation.objects.filter(step__isnull=False).values("step_id"))
        .select_related("run")
        .order_by("intent_at")[:limit]
    )
    sent = 0
    for step in steps:
        team_sla = slas.get(step.run.team_id, sla_seconds())
        if (now - step.intent_at).total_seconds() < team_sla:
            continue  # within its own team's SLA
        waited = int((now - step.intent_at).total_seconds() // 60)
        recipients, webhooks = reach.of(step.run.team_id)
        if not recipients and not webhooks:
            continue  # nobody in the item's team can be notified
        try:
            with transaction.atomic():
                Escalation.objects.create(
                    step=step, run_id=step.run_id, sent_at=now, recipients=recipients
                )
                webhooks_notify(
                    webhooks,
                    f"Review waiting {waited} min: {slack_escaped(step.name)} (step "
                    f"{step.index} of {slack_escaped(step.run.agent)} run "
                    f"{str(step.run_id)[:8]}). "
                    f"Decide: {base}/queue/{step.run_id}/{step.index}/",
                    now=now,
                )
                send_mail(
                    subject=f"[Agent Ledger] review waiting {waited} min: {step.name} "
                    f"(run {step.run.agent} {str(step.run_id)[:8]})",
                    message=(
                        f"Step {step.index} ({step.name}) of run {step.run_id} "
                        f"({step.run.agent}) has been {_waiting_as(step)} since "
                        f"{step.intent_at:%Y-%m-%d %H:%M:%S} UTC, longer than the "
                        f"{team_sla // 60}-minute SLA.\n\n"
                        f"Decide: {base}/queue/{step.run_id}/{step.index}/\n"
                    ),
                    from_email=settings.DEFAULT_FROM_EMAIL,
                    recipient_list=recipients,
                )
        except IntegrityError:
            continue  # another beat got there first
        sent += 1
    runs = list(
        Run.objects.filter(status=RunStatus.NEEDS_REVIEW, updated_at__lt=cutoff)
        .exclude(steps__state=StepState.UNKNOWN)
        .exclude(pk__in=Escalation.objects.filter(step__isnull=True).values("run_id"))
        .order_by("updated_at")[:limit]
    )
    for run in runs:
        if (now - run.updated_at).total_seconds() < slas.get(run.team_id, sla_seconds()):
            continue
        recipients, webhooks = reach.of(run.team_id)
        if not recipients and not webhooks:
            continue
        try:
            with transaction.atomic():
                Escalation.objects.create(run=run, sent_at=now, recipients=recipients)
                webhooks_notify(
                    webhooks,
                    f"Run waiting for review: {slack_escaped(run.agent)} {str(run.pk)[:8]} "
                    f"({slack_escaped(run.status_reason)}). Decide: {base}/runs/{run.pk}/",
                    now=now,
                )
                send_mail(
                    subject=f"[Agent Ledger] run waiting for review: {run.agent} {str(run.pk)[:8]}",
                    message=(
                        f"Run {run.pk} ({run.agent}) is in review ({run.status_reason}) "
                        f"longer than the SLA.\n\nDecide: {base}/runs/{run.pk}/\n"
                    ),
                    from_email=settings.DEFAULT_FROM_EMAIL,
                    recipient_list=recipients,
                )
        except IntegrityError:
            continue
        sent += 1
    return sent
