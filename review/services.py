"""Dashboard actions: each calls the journal's service and writes its audit entry in one transaction.

Views call these and nothing else for writes, so an action and its audit entry commit together
or not at all. Refusals are runs.api_errors.ApplicationError (code, message, details).
"""

from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone

from review.audit import audit_record
from review.models import Escalation, LoginFailure
from review.roles import SUPERVISORS
from runs import clock
from runs.api_errors import ApplicationError
from runs.constants import RunStatus, StepState
from runs.models import BudgetPolicy, Run, Step, TokenScope, WorkerToken
from runs.services import run_limits_raise, run_review_decide, step_resolve
from runs.tokens import worker_token_create, worker_token_revoke


def claim_seconds() -> int:
    return int(getattr(settings, "REVIEW_CLAIM_SECONDS", 15 * 60))


def sla_seconds() -> int:
    return int(getattr(settings, "REVIEW_SLA_SECONDS", 15 * 60))


def _step_target(run_id: UUID | str, index: int) -> str:
    return f"step:{run_id}#{index}"


# --- review decisions -------------------------------------------------------------------------


def review_step_resolve(
    *,
    user: AbstractBaseUser,
    run_id: UUID | str,
    index: int,
    action: str,
    note: str,
    result: Any = None,
) -> Step:
    """Resolve an unknown step (sent/retry/abandon); refused while another person holds a claim."""
    with transaction.atomic():
        claimed = (
            Step.objects.select_related("claimed_by")
            .filter(run_id=run_id, index=index, claim_expires_at__gt=clock.now())
            .exclude(claimed_by_id=user.pk)
            .exclude(claimed_by=None)
            .first()
        )
        if claimed is not None and claimed.state == StepState.UNKNOWN:
            assert claimed.claimed_by is not None and claimed.claim_expires_at is not None
            raise ApplicationError(
                "claimed",
                f"{claimed.claimed_by.get_username()} is working on this item "
                f"(claim until {claimed.claim_expires_at:%H:%M:%S} UTC).",
                details={"by": claimed.claimed_by.get_username()},
            )
        step = step_resolve(
            run_id=run_id,
            index=index,
            action=action,
            note=note,
            by=user.get_username(),
            result=result,
        )
        audit_record(
            actor=user,
            action=f"step.resolve.{action}",
            target=_step_target(run_id, index),
            note=note,
            details={
                "run_id": str(run_id),
                "index": index,
                "action": action,
                "result": result,
                "step": step.name,
                "idempotency_key": step.idempotency_key,
            },
        )
        return step


def review_step_claim(*, user: AbstractBaseUser, run_id: UUID | str, index: int) -> Step:
    """Claim an unknown step for `claim_seconds()`; a live claim by someone else is refused."""
    with transaction.atomic():
        step = (
            Step.objects.select_for_update()
            .filter(run_id=run_id, index=index)
            .select_related(None)
            .first()
        )
        if step is None:
            raise ApplicationError("not_found", "No such step.", status_code=404)
        if step.state != StepState.UNKNOWN:
            raise ApplicationError(
                "not_unknown", f"Step {index} is {step.state}; there is nothing to claim."
            )
        now = clock.now()
        if (
            step.claimed_by_id not in (None, user.pk)
            and step.claim_expires_at is not None
            and step.claim_expires_at > now
        ):
            holder = get_user_model()._default_manager.get(pk=step.claimed_by_id)
            raise ApplicationError(
                "claimed",
                f"{holder.get_username()} already claimed this item "
                f"until {step.claim_expires_at:%H:%M:%S} UTC.",
                details={"by": holder.get_username()},
            )
        step.claimed_by_id = user.pk
        step.claim_expires_at = now + timedelta(seconds=claim_seconds())
        step.save(update_fields=["claimed_by", "claim_expires_at"])
        audit_record(
            actor=user,
            action="step.claim",
            target=_step_target(run_id, index),
            details={"until": step.claim_expires_at.isoformat()},
        )
        return step


def review_step_release(*, user: AbstractBaseUser, run_id: UUID | str, index: int) -> Step:
    """Give up one's own claim (someone else's live claim is not released)."""
    with transaction.atomic():
        step = Step.objects.select_for_update().filter(run_id=run_id, index=index).first()
        if step is None:
            raise ApplicationError("not_found", "No such step.", status_code=404)
        if step.claimed_by_id != user.pk:
            raise ApplicationError("not_claimed", "You do not hold a claim on this item.")
        step.claimed_by = None
        step.claim_expires_at = None
        step.save(update_fields=["claimed_by", "claim_expires_at"])
        audit_record(actor=user, action="step.release", target=_step_target(run_id, index))
        return step


def review_run_decide(*, user: AbstractBaseUser, run_id: UUID | str, action: str, note: str) -> Run:
    """Resume or abandon a run in review that has no unknown step (a crash loop)."""
    with transaction.atomic():
        run = run_review_decide(run_id=run_id, action=action, note=note, by=user.get_username())
        audit_record(
            actor=user,
            action=f"run.review.{action}",
            target=f"run:{run_id}",
            note=note,
            details={"status": run.status},
        )
        return run


LIMIT_FIELDS = (
    "limit_steps",
    "limit_tokens",
    "limit_cost_usd",
    "limit_wall_seconds",
    "limit_recoveries",
)


def review_limits_raise(
    *, user: AbstractBaseUser, run_id: UUID | str, note: str, limits: dict[str, Any]
) -> Run:
    with transaction.atomic():
        current = Run.objects.filter(pk=run_id).first()
        previous = (
            {
                f: None if getattr(current, f) is None else str(getattr(current, f))
                for f in LIMIT_FIELDS
            }
            if current
            else {}
        )
        run = run_limits_raise(run_id=run_id, by=user.get_username(), note=note, limits=limits)
        audit_record(
            actor=user,
            action="run.limits.raise",
            target=f"run:{run_id}",
            note=note,
            details={
                "before": previous,
                "requested": {k: str(v) for k, v in limits.items() if v is not None},
                "status": run.status,
            },
        )
        return run


# --- budget policies ---------------------------------------------------------------------------

POLICY_FIELDS = (
    "name",
    "agent",
    "is_default",
    "max_steps",
    "max_tokens",
    "max_wall_seconds",
    "max_cost_usd",
    "max_recoveries",
)


def _policy_values(policy: BudgetPolicy) -> dict[str, Any]:
    return {
        f: (str(v) if isinstance(v, Decimal) else v)
        for f in POLICY_FIELDS
        for v in [getattr(policy, f)]
    }


def budget_policy_save(
    *, user: AbstractBaseUser, policy: BudgetPolicy | None, values: dict[str, Any]
) -> BudgetPolicy:
    """Create or edit a policy; making it the default moves the default flag onto it.

    Running runs keep the limits they copied; this only affects runs created afterwards.
    """
    with transaction.atomic():
        creating = policy is None
        before = None if policy is None else _policy_values(policy)
        target = policy or BudgetPolicy()
        for field in POLICY_FIELDS:
            if field in values:
                setattr(target, field, values[field])
        if target.is_default:
            target.agent = None
            BudgetPolicy.objects.filter(is_default=True).exclude(pk=target.pk).update(
                is_default=False
            )
        try:
            with transaction.atomic():
                target.save()
        except IntegrityError as exc:
            raise ApplicationError(
                "validation_error",
                "The policy conflicts with another one (name or agent already used).",
                status_code=400,
                details={"policy": [str(exc).splitlines()[0]]},
            ) from exc
        audit_record(
            actor=user,
            action="policy.create" if creating else "policy.update",
            target=f"policy:{target.pk}",
            note=str(values.get("note", "")),
            details={"before": before, "after": _policy_values(target)},
        )
        return target


# --- worker tokens -----------------------------------------------------------------------------


def review_token_create(
    *,
    user: AbstractBaseUser,
    name: str,
    agents: list[str] | tuple[str, ...] = (),
    tools_direct: bool = False,
) -> tuple[WorkerToken, str]:
    name = name.strip()
    if not name:
        raise ApplicationError(
            "validation_error",
            "A token needs a name.",
            status_code=400,
            details={"name": ["Required."]},
        )
    with transaction.atomic():
        token, raw = worker_token_create(
            name=name,
            created_by=user.get_username(),
            agents=tuple(agents),
            scopes=(TokenScope.TOOLS_DIRECT,) if tools_direct else (),
        )
        audit_record(
            actor=user,
            action="token.create",
            target=f"token:{token.pk}",
            details={
                "name": token.name,
                "prefix": token.prefix,
                "scope": token.scope,
                "agents": token.agents,
            },
        )
        return token, raw


def review_token_revoke(*, user: AbstractBaseUser, token_id: int) -> WorkerToken:
    with transaction.atomic():
        if not WorkerToken.objects.filter(pk=token_id).exists():
            raise ApplicationError("not_found", "No such token.", status_code=404)
        token = worker_token_revoke(token_id=token_id)
        audit_record(
            actor=user,
            action="token.revoke",
            target=f"token:{token.pk}",
            details={"name": token.name, "prefix": token.prefix},
        )
        return token


# --- login throttling ------------------------------------------------------------------------


def login_max_failures() -> int:
    return int(getattr(settings, "LOGIN_MAX_FAILURES", 5))


def login_lockout_seconds() -> int:
    return int(getattr(settings, "LOGIN_LOCKOUT_SECONDS", 15 * 60))


def login_locked_until(*, username: str, ip: str) -> Any:
    """When the (username, ip) pair may try again, or None if it may now."""
    row = LoginFailure.objects.filter(username=username.lower()[:150], ip=ip).first()
    if row and row.locked_until and row.locked_until > timezone.now():
        return row.locked_until
    return None


def login_failure_record(*, username: str, ip: str) -> LoginFailure:
    """Count one failure; the window restarts after a lockout period without failures."""
    now = timezone.now()
    window = timedelta(seconds=login_lockout_seconds())
    with transaction.atomic():
        row, _ = LoginFailure.objects.select_for_update().get_or_create(
            username=username.lower()[:150], ip=ip, defaults={"first_failure_at": now}
        )
        if now - row.first_failure_at > window or (row.locked_until and row.locked_until <= now):
            row.failures = 0
            row.first_failure_at = now
            row.locked_until = None
        row.failures += 1
        if row.failures >= login_max_failures():
            row.locked_until = now + window
        row.save()
        return row


def login_success_clear(*, username: str, ip: str) -> None:
    LoginFailure.objects.filter(username=username.lower()[:150], ip=ip).delete()


def login_failures_prune() -> int:
    """Forget failure counters whose window and lockout are both over (guessed names pile up)."""
    cutoff = timezone.now() - timedelta(seconds=login_lockout_seconds())
    deleted, _ = (
        LoginFailure.objects.filter(first_failure_at__lt=cutoff)
        .exclude(locked_until__gt=timezone.now())
        .delete()
    )
    return deleted


# --- escalation ---------------------------------------------------------------------------------


def review_items_escalate(*, limit: int = 200) -> int:
    """Mail the supervisors once per item waiting longer than the SLA; returns mails sent.

    The Escalation row is inserted in the same transaction as the send: a failed send rolls it
    back (retried on the next beat), and the unique constraint stops a second mail for an item.
    """
    now = clock.now()
    cutoff = now - timedelta(seconds=sla_seconds())
    recipients = sorted(
        {
            u.email
            for g in Group.objects.filter(name=SUPERVISORS).prefetch_related("user_set")
            for u in g.user_set.all()
            if u.is_active and u.email
        }
    )
    if not recipients:
        return 0
    base = getattr(settings, "LEDGER_DASHBOARD_URL", settings.LEDGER_URL).rstrip("/")
    steps = list(
        Step.objects.filter(state=StepState.UNKNOWN, intent_at__lt=cutoff)
        .exclude(pk__in=Escalation.objects.filter(step__isnull=False).values("step_id"))
        .select_related("run")
        .order_by("intent_at")[:limit]
    )
    sent = 0
    for step in steps:
        waited = int((now - step.intent_at).total_seconds() // 60)
        try:
            with transaction.atomic():
                Escalation.objects.create(step=step, sent_at=now, recipients=recipients)
                send_mail(
                    subject=f"[Agent Ledger] review waiting {waited} min: {step.name} "
                    f"(run {step.run.agent} {str(step.run_id)[:8]})",
                    message=(
                        f"Step {step.index} ({step.name}) of run {step.run_id} "
                        f"({step.run.agent}) has been unknown since "
                        f"{step.intent_at:%Y-%m-%d %H:%M:%S} UTC, longer than the "
                        f"{sla_seconds() // 60}-minute SLA.\n\n"
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
        try:
            with transaction.atomic():
                Escalation.objects.create(run=run, sent_at=now, recipients=recipients)
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
