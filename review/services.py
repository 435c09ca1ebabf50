"""Dashboard actions: each calls the journal's service and writes its audit entry in one transaction.

Views call these and nothing else for writes, so an action and its audit entry commit together
or not at all. Refusals are runs.api_errors.ApplicationError (code, message, details).
"""

import asyncio
import hashlib
import hmac
import ipaddress
import json
import socket
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import F, Model
from django.utils import timezone

from review.audit import audit_record
from review.models import AuditEntry, Escalation, EscalationWebhook, LoginFailure, WebhookDelivery
from review.roles import SUPERVISORS
from runs import clock
from runs.api_errors import ApplicationError, invalid, note_required
from runs.constants import (
    AGENT_NAME_RULE,
    BUDGET_LIMITS,
    FINAL_STATUSES,
    EnforcedBy,
    Resolution,
    RunStatus,
    StepState,
    agent_name_valid,
)
from runs.models import ApprovalRule, BudgetPolicy, Run, Step, TokenScope, WorkerToken
from runs.services.actions import run_limits_raise
from runs.services.approvals import approval_expire_if_due, step_approve, step_deny
from runs.services.decisions import resolution_validate, run_review_decide, step_resolve
from runs.tokens import worker_token_create, worker_token_revoke
from tools.lookups import LookupAnswer, lookup_for, tool_lookup
from tools.models import McpTool, McpToolMark


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
    confirmed_may_repeat: bool = False,
) -> Step:
    """Resolve an unknown step (sent/retry/abandon); refused while another person holds a claim.

    A retry of a step nobody enforces may make the effect happen twice (the tool cannot tell a
    repeat): it needs `confirmed_may_repeat`, and the audit entry records the confirmation.
    """
    resolution_validate(action=action, note=note, result=result)
    with transaction.atomic():
        step_now = Step.objects.filter(run_id=run_id, index=index).only("enforced_by").first()
        risky = (
            action == Resolution.RETRY
            and step_now is not None
            and step_now.enforced_by == EnforcedBy.NOBODY
        )
        if risky and not confirmed_may_repeat:
            raise ApplicationError(
                "confirmation_required",
                "Nobody enforces this tool's idempotency: a retry may make it happen twice "
                "(a second email to the customer). Confirm that this is acceptable.",
                details={"confirm": ["Required for a retry of a step enforced by nobody."]},
            )
        claimed = (
            Step.objects.select_related("claimed_by")
            .filter(run_id=run_id, index=index)
            .exclude(claimed_by_id=user.pk)
            .first()
        )
        if (
            claimed is not None
            and claimed.state == StepState.UNKNOWN
            and claimed.claim_is_live(clock.now())
        ):
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
                **({"confirmed_may_repeat": True} if risky else {}),
            },
        )
        return step


def _step_decided(
    decide: Callable[..., Step],
    action: str,
    *,
    user: AbstractBaseUser,
    run_id: UUID | str,
    index: int,
    note: str,
    more: Callable[[Step], dict[str, Any]] = lambda step: {},
) -> Step:
    """One person's decision on a step waiting for approval (`decide` is step_approve or
    step_deny) and its audit entry `action`, in one transaction. A request past its expiry is
    denied first, and that stays recorded even if this decision is then refused."""
    approval_expire_if_due(run_id=run_id, index=index)
    with transaction.atomic():
        step = decide(run_id=run_id, index=index, by=user.get_username(), note=note)
        details = {"run_id": str(run_id), "index": index, "step": step.name, **more(step)}
        audit_record(
            actor=user,
            action=action,
            target=_step_target(run_id, index),
            note=note,
            details=details,
        )
        return step


def review_step_approve(
    *, user: AbstractBaseUser, run_id: UUID | str, index: int, note: str = ""
) -> Step:
    """One person's approval (the audit entry names what was approved: the arguments' hash)."""
    return _step_decided(
        step_approve,
        "step.approve",
        user=user,
        run_id=run_id,
        index=index,
        note=note,
        more=lambda step: {"arguments_hash": step.arguments_hash, "state": step.state},
    )


def review_step_deny(*, user: AbstractBaseUser, run_id: UUID | str, index: int, note: str) -> Step:
    return _step_decided(step_deny, "step.deny", user=user, run_id=run_id, index=index, note=note)


BULK_RESOLUTIONS = ("sent", "retry", "abandon")


def review_steps_decide(
    *,
    user: AbstractBaseUser,
    items: list[tuple[str, int]],
    action: str,
    note: str,
    confirmed_may_repeat: bool = False,
) -> list[Step]:
    """One decision for many items that share their tool and their situation (same tool name,
    state and enforcer): all or none, one audit entry per item, as if decided one by one."""
    steps = [Step.objects.filter(run_id=run_id, index=index).first() for run_id, index in items]
    missing = [f"{r}#{i}" for (r, i), s in zip(items, steps, strict=True) if s is None]
    if missing or not steps:
        raise ApplicationError(
            "not_found", f"No such items: {', '.join(missing)}.", status_code=404
        )
    kinds = {(s.name, s.state, s.enforced_by) for s in steps if s is not None}
    if len(kinds) > 1:
        raise ApplicationError(
            "validation_error",
            "Decide together only items of the same tool in the same situation; these are "
            + "; ".join(sorted(f"{n} ({st}, enforced by {e})" for n, st, e in kinds))
            + ".",
            status_code=400,
        )
    with transaction.atomic():
        decided = []
        for run_id, index in items:
            if action in BULK_RESOLUTIONS:
                decided.append(
                    review_step_resolve(
                        user=user,
                        run_id=run_id,
                        index=index,
                        action=action,
                        note=note,
                        confirmed_may_repeat=confirmed_may_repeat,
                    )
                )
            elif action == "approve":
                decided.append(
                    review_step_approve(user=user, run_id=run_id, index=index, note=note)
                )
            elif action == "deny":
                decided.append(review_step_deny(user=user, run_id=run_id, index=index, note=note))
            else:
                raise ApplicationError("validation_error", "Unknown action.", status_code=400)
        return decided


def review_step_assign(
    *, user: AbstractBaseUser, run_id: UUID | str, index: int, assignee: str
) -> Step:
    """Give an item to a person (a claim in their name, for `claim_seconds()`); reassigning an
    item someone else holds is allowed and audited with who had it."""
    with transaction.atomic():
        step = Step.objects.select_for_update().filter(run_id=run_id, index=index).first()
        if step is None:
            raise ApplicationError("not_found", "No such step.", status_code=404)
        if step.state not in (StepState.UNKNOWN, StepState.AWAITING_APPROVAL):
            raise ApplicationError(
                "not_unknown", f"Step {index} is {step.state}; there is nothing to assign."
            )
        person = (
            get_user_model()
            ._default_manager.filter(
                username=assignee, is_active=True, groups__permissions__codename="resolve"
            )
            .first()
        )
        if person is None:
            raise invalid(
                "assignee", f"{assignee} cannot decide review items.", "Not someone who may decide."
            )
        previous = step.claimed_by.get_username() if step.claimed_by else None
        step.claimed_by = person
        step.claim_expires_at = clock.now() + timedelta(seconds=claim_seconds())
        step.save(update_fields=["claimed_by", "claim_expires_at"])
        audit_record(
            actor=user,
            action="step.assign",
            target=_step_target(run_id, index),
            details={"to": assignee, "from": previous, "until": step.claim_expires_at.isoformat()},
        )
        return step


def review_step_settle_by_lookup(*, run_id: UUID | str, index: int) -> LookupAnswer | None:
    """Ask the tool's lookup about an unknown step's key; a definite answer settles the step.

    completed → resolved `sent` (the tool did it); absent → resolved `retry` (it never took
    effect, so the same key runs it once). Either is recorded as the step's resolution by
    `system:lookup`, with the answer in the note, and audited. No answer (late, failed, unclear)
    leaves the item to a person; it is audited once per step. None: the tool has no lookup.
    """
    step = Step.objects.filter(run_id=run_id, index=index).first()
    if step is None or step.state != StepState.UNKNOWN or not lookup_for(step.name):
        return None
    answer = tool_lookup(step.name, step.idempotency_key)
    if answer is None:
        return None
    target = _step_target(run_id, index)
    if answer.state == "no_answer":
        if not AuditEntry.objects.filter(action="step.lookup.no_answer", target=target).exists():
            audit_record(
                actor="system:lookup",
                action="step.lookup.no_answer",
                target=target,
                details={"source": answer.source, "detail": answer.detail},
            )
        return answer
    action = Resolution.SENT if answer.state == "completed" else Resolution.RETRY
    note = (
        f"The tool's lookup ({answer.source}) answered {answer.state} for key "
        f"{step.idempotency_key}."
    )
    try:
        with transaction.atomic():
            step_resolve(
                run_id=run_id,
                index=index,
                action=action,
                note=note,
                by="system:lookup",
                result={"settled_by_lookup": answer.state} if action == Resolution.SENT else None,
            )
            audit_record(
                actor="system:lookup",
                action=f"step.settle.{action}",
                target=target,
                note=note,
                details={"source": answer.source, "answer": answer.state},
            )
    except ApplicationError:
        pass  # a person decided meanwhile: theirs stands
    return answer


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
        if step.state not in (StepState.UNKNOWN, StepState.AWAITING_APPROVAL):
            raise ApplicationError(
                "not_unknown", f"Step {index} is {step.state}; there is nothing to claim."
            )
        now = clock.now()
        if step.claimed_by_id != user.pk and step.claim_is_live(now):
            assert step.claimed_by_id is not None
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


LIMIT_FIELDS = tuple(f"limit_{name}" for name in BUDGET_LIMITS)


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


def _setting_values(setting: Model, fields: Iterable[str]) -> dict[str, Any]:
    """A setting's fields as its audit entry keeps them (a Decimal as text)."""
    return {
        f: (str(v) if isinstance(v, Decimal) else v) for f in fields for v in [getattr(setting, f)]
    }


def _setting_save[M: Model](
    *,
    user: AbstractBaseUser | str,
    stored: M | None,
    blank: M,
    fields: tuple[str, ...],
    values: dict[str, Any],
    kind: str,
    conflict: Callable[[IntegrityError], ApplicationError],
    check: Callable[[M], None] = lambda setting: None,
) -> M:
    """Create (from `blank`) or edit (`stored`) an admin's setting with `values`, audited as
    `<kind>.create` or `<kind>.update` with its fields before and after, in one transaction.
    `check` refuses or completes it before it is saved; a unique constraint it breaks is
    answered as `conflict`."""
    with transaction.atomic():
        before = None if stored is None else _setting_values(stored, fields)
        target = stored or blank
        for field in fields:
            if field in values:
                setattr(target, field, values[field])
        check(target)
        try:
            with transaction.atomic():
                target.save()
        except IntegrityError as exc:
            raise conflict(exc) from exc
        audit_record(
            actor=user,
            action=f"{kind}.create" if stored is None else f"{kind}.update",
            target=f"{kind}:{target.pk}",
            note=str(values.get("note", "")),
            details={"before": before, "after": _setting_values(target, fields)},
        )
        return target


def _agent_check(agent: str | None) -> None:
    """An agent name as a run, a token, a policy and an approval rule all take it."""
    if agent and not agent_name_valid(agent):
        raise invalid(
            "agent",
            f"Not an agent name: {agent} ({AGENT_NAME_RULE}).",
            f"Not an agent name: {agent} ({AGENT_NAME_RULE}).",
        )


def _policy_check(policy: BudgetPolicy) -> None:
    """A policy belongs to one agent or is the default; a new default takes the flag over."""
    policy.agent = (policy.agent or "").strip() or None
    _agent_check(policy.agent)
    if policy.is_default and policy.agent:
        raise ApplicationError(
            "validation_error",
            "The default policy applies to every agent.",
            status_code=400,
            details={
                "agent": ["The default policy applies to every agent; leave the agent empty."]
            },
        )
    if not policy.is_default and not policy.agent:
        raise invalid(
            "agent",
            "A policy belongs to an agent or is the default.",
            "Assign the policy to an agent, or make it the default.",
        )


def _default_replace(user: AbstractBaseUser | str, policy: BudgetPolicy) -> None:
    """A new default takes the flag over from the old one, whose change is audited on its own
    (`policy.update`, is_default true → false): the old default then applies to no agent."""
    if not policy.is_default:
        return
    olds = BudgetPolicy.objects.select_for_update().filter(is_default=True).exclude(pk=policy.pk)
    for old in olds:
        before = _setting_values(old, POLICY_FIELDS)
        old.is_default = False
        old.save(update_fields=["is_default", "updated_at"])
        audit_record(
            actor=user,
            action="policy.update",
            target=f"policy:{old.pk}",
            note=f"No longer the default: “{policy.name}” is. It applies to no agent now.",
            details={"before": before, "after": _setting_values(old, POLICY_FIELDS)},
        )


def budget_policy_save(
    *, user: AbstractBaseUser | str, policy: BudgetPolicy | None, values: dict[str, Any]
) -> BudgetPolicy:
    """Create or edit a policy; making it the default moves the default flag onto it (the old
    default's change is an audit entry of its own).

    Running runs keep the limits they copied; this only affects runs created afterwards.
    """

    def check(target: BudgetPolicy) -> None:
        _policy_check(target)
        _default_replace(user, target)

    def conflict(exc: IntegrityError) -> ApplicationError:
        taken = "agent" if "agent" in str(exc) else "name"
        value = values.get(taken)
        return invalid(
            taken,
            f"Another policy has this {taken} already ({value}): edit that one instead.",
            f"Another policy has this {taken} already.",
        )

    return _setting_save(
        user=user,
        stored=policy,
        blank=BudgetPolicy(),
        fields=POLICY_FIELDS,
        values=values,
        kind="policy",
        conflict=conflict,
        check=check,
    )


def budget_policy_delete(*, user: AbstractBaseUser, policy_id: int, note: str = "") -> str:
    """Delete a policy, audited with its limits (`policy.delete`); its name. Runs keep the
    limits they copied. New runs of its agent get the default policy's limits; deleting the
    default, new runs of agents without their own policy are refused (`no_budget_policy`)."""
    with transaction.atomic():
        policy = BudgetPolicy.objects.select_for_update().filter(pk=policy_id).first()
        if policy is None:
            raise ApplicationError("not_found", "No such policy.", status_code=404)
        values = _setting_values(policy, POLICY_FIELDS)
        policy.delete()
        audit_record(
            actor=user,
            action="policy.delete",
            target=f"policy:{policy_id}",
            note=note,
            details={"before": values},
        )
        return str(values["name"])


# --- approval rules ----------------------------------------------------------------------------

RULE_FIELDS = ("agent", "tool_pattern", "approvals_required", "expires_after_seconds", "active")


def approval_rule_save(
    *, user: AbstractBaseUser, rule: ApprovalRule | None, values: dict[str, Any]
) -> ApprovalRule:
    """Create or edit an approval rule, audited. New write intents see it at once; steps
    already waiting keep the request they were given. The forks' fence is not edited here."""
    if rule is not None and rule.is_fork_fence:
        raise ApplicationError(
            "not_found", "No such approval rule (this one holds forks' writes).", status_code=404
        )
    return _setting_save(
        user=user,
        stored=rule,
        blank=ApprovalRule(created_by=user.get_username()),
        fields=RULE_FIELDS,
        values=values,
        kind="approval_rule",
        conflict=lambda _: invalid(
            "tool_pattern",
            "A rule for this agent and tool pattern exists already.",
            "Already has a rule.",
        ),
        check=_rule_check,
    )


def _rule_check(rule: ApprovalRule) -> None:
    rule.agent = (rule.agent or "").strip()
    _agent_check(rule.agent)


# --- MCP upstream tools --------------------------------------------------------------------------


def mcp_tool_mark(*, user: AbstractBaseUser, tool_id: int, mark: str, note: str) -> McpTool:
    """An admin says what an MCP upstream tool is: `read`, `write`, or "" (the upstream's hint
    stands). Proxies honour it from their next `tools/list`; audited as `mcp_tool.mark`."""
    if mark not in McpToolMark.values:
        raise invalid(
            "mark", f"A mark is one of {McpToolMark.values}.", f"One of {McpToolMark.values}."
        )
    note = note_required(note, "Say why in a note.")
    with transaction.atomic():
        tool = McpTool.objects.select_for_update().get(pk=tool_id)
        before = tool.mark
        tool.mark = mark
        tool.marked_by = user.get_username() if mark else ""
        tool.marked_at = timezone.now() if mark else None
        tool.save(update_fields=["mark", "marked_by", "marked_at"])
        audit_record(
            actor=user,
            action="mcp_tool.mark",
            target=f"mcp_tool:{tool.server}/{tool.name}",
            note=note,
            details={
                "server": tool.server,
                "tool": tool.name,
                "read_only_hint": tool.read_only_hint,
                "before": before,
                "after": mark,
            },
        )
    return tool


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
        raise invalid("name", "A token needs a name.", "Required.")
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
        locks = row.failures >= login_max_failures() and row.locked_until is None
        if row.failures >= login_max_failures():
            row.locked_until = now + window
        row.save()
        audit_record(
            actor="anonymous",
            action="login.failed",
            target=f"user:{username[:150]}",
            details={"ip": ip, "failures": row.failures},
        )
        if locks:
            assert row.locked_until is not None
            audit_record(
                actor="system:login",
                action="login.lockout",
                target=f"user:{username[:150]}",
                details={"ip": ip, "until": row.locked_until.isoformat()},
            )
        return row


def login_refused_record(*, username: str, ip: str, until: Any) -> None:
    """A login attempt during a lockout: refused without checking the password, audited."""
    audit_record(
        actor="anonymous",
        action="login.refused_locked",
        target=f"user:{username[:150]}",
        details={"ip": ip, "until": until.isoformat()},
    )


def login_success_clear(*, user: AbstractBaseUser, ip: str) -> None:
    """A successful login: the failure counter goes, the audit log gets the login."""
    username = user.get_username()
    LoginFailure.objects.filter(username=username.lower()[:150], ip=ip).delete()
    audit_record(actor=user, action="login", target=f"user:{username}", details={"ip": ip})


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


def escalation_reachable() -> bool:
    """Can an escalation reach anyone: a supervisor with an address, or an active webhook?"""
    has_address = (
        get_user_model()
        ._default_manager.filter(is_active=True, groups__name=SUPERVISORS)
        .exclude(email="")
        .exists()
    )
    return has_address or EscalationWebhook.objects.filter(active=True).exists()


def webhook_signature(secret: str, body: bytes) -> str:
    """What X-Agent-Ledger-Signature carries: sha256=<hex HMAC-SHA256 of the body>."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def slack_escaped(text: str) -> str:
    """Text from a worker (a step's name, an agent's) as Slack shows it literally: `&`, `<`, `>`
    escaped as Slack's message formatting asks, so it cannot make a link or a `<!channel>`."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _webhooks_notify(webhooks: list[EscalationWebhook], text: str, *, now: Any) -> None:
    """Queue one delivery per webhook (Slack-compatible `{"text": …}`), sent after commit."""
    from review.tasks import deliver_webhook

    body = json.dumps({"text": text}, ensure_ascii=False, separators=(",", ":"))
    for webhook in webhooks:
        delivery = WebhookDelivery.objects.create(webhook=webhook, body=body, created_at=now)
        deliver_webhook.delay_on_commit(delivery.pk)  # type: ignore[attr-defined]


class WebhookFailed(Exception):
    """A delivery attempt failed (no answer, or not 2xx); Celery retries it with backoff."""


class WebhookTargetRefused(Exception):
    """A webhook's host is (or resolves to) a private, loopback or link-local address."""


def webhook_allow_private() -> bool:
    return bool(getattr(settings, "WEBHOOK_ALLOW_PRIVATE", False))


def _not_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return not address.is_global or address.is_multicast


def webhook_addresses(url: str) -> list[str]:
    """Every address the URL's host resolves to, each one public; WebhookTargetRefused when one
    is private, loopback, link-local or otherwise not global, or the host does not resolve.
    With WEBHOOK_ALLOW_PRIVATE nothing is checked (an empty list). Checked when a webhook is added and again at each delivery (the
    delivery connects to an address checked here: a DNS answer that changes in between, to
    reach an inside address, changes nothing)."""
    host = urlsplit(url).hostname or ""
    if not host:
        raise WebhookTargetRefused("The URL names no host.")
    if webhook_allow_private():
        return []  # any address will do: connect to the URL as it is
    port = urlsplit(url).port or (443 if url.lower().startswith("https") else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookTargetRefused(f"{host} does not resolve ({exc}).") from exc
    addresses = sorted({str(info[4][0]) for info in infos})
    private = [a for a in addresses if _not_public(ipaddress.ip_address(a.split("%")[0]))]
    if private:
        raise WebhookTargetRefused(
            f"{host} is a private, loopback or link-local address ({', '.join(private)}): "
            "webhooks go to public receivers (WEBHOOK_ALLOW_PRIVATE=1 allows others)."
        )
    return addresses


def webhook_delivery_seconds() -> float:
    return float(getattr(settings, "WEBHOOK_DELIVERY_SECONDS", 10))


def _post_by_deadline(url: str, body: bytes, headers: dict[str, str], seconds: float) -> int:
    """POST `body` and read the whole answer within `seconds` in all (connect, headers, body):
    a receiver that trickles its answer is cut off at the deadline. Connects to an address
    `webhook_addresses` checked (TLS still verifies the URL's host name). The status code."""
    import httpx

    parts = urlsplit(url)
    host = parts.hostname or ""
    addresses = webhook_addresses(url)
    target, sent_headers = url, dict(headers)
    if addresses:  # connect to the address checked, not to what DNS answers next
        pinned = f"[{addresses[0]}]" if ":" in addresses[0] else addresses[0]
        netloc = f"{pinned}:{parts.port}" if parts.port else pinned
        target = parts._replace(netloc=netloc).geturl()
        sent_headers["Host"] = parts.netloc.rsplit("@", 1)[-1]

    async def post() -> int:
        async with (
            # trust_env off: no HTTP_PROXY in between, the connection goes to the address checked
            httpx.AsyncClient(timeout=seconds, follow_redirects=False, trust_env=False) as client,
            client.stream(
                "POST",
                target,
                content=body,
                headers=sent_headers,
                extensions={"sni_hostname": host},
            ) as answer,
        ):
            async for _ in answer.aiter_raw():
                pass  # read (and drop) the whole answer, within the deadline
            return answer.status_code

    async def bounded() -> int:
        return await asyncio.wait_for(post(), timeout=seconds)

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a Celery worker, a management command: no loop in this thread
        return asyncio.run(bounded())
    # called from code that runs a loop in this thread: a thread of its own for the delivery
    with ThreadPoolExecutor(max_workers=1) as delivery:
        return delivery.submit(asyncio.run, bounded()).result()


def webhook_deliver(*, delivery_id: int) -> bool:
    """POST one delivery, signed; True when the receiver answered 2xx (or it was delivered
    before). A failure is recorded and raised as WebhookFailed for the task to retry. The
    whole attempt has WEBHOOK_DELIVERY_SECONDS; a private target is refused (and retried: an
    admin may fix the URL or its DNS)."""
    import httpx

    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None or delivery.delivered_at is not None:
        return delivery is not None
    body = delivery.body.encode("utf-8")
    headers = {
        "Content-Type": "application/json",
        "X-Agent-Ledger-Signature": webhook_signature(delivery.webhook.secret, body),
        "X-Agent-Ledger-Delivery": str(delivery.pk),
    }
    WebhookDelivery.objects.filter(pk=delivery.pk).update(attempts=F("attempts") + 1)
    seconds = webhook_delivery_seconds()
    try:
        status = _post_by_deadline(delivery.webhook.url, body, headers, seconds)
        error = "" if 200 <= status < 300 else f"HTTP {status}"
    except TimeoutError:
        error = f"no complete answer within {seconds:g} s"
    except WebhookTargetRefused as exc:
        error = str(exc)[:500]
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
    if error:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(last_error=error)
        raise WebhookFailed(error)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(delivered_at=clock.now(), last_error="")
    return True


def escalation_webhook_add(*, user: AbstractBaseUser, url: str, secret: str) -> EscalationWebhook:
    if not url.startswith(("http://", "https://")):
        raise invalid("url", "A webhook URL starts with http:// or https://.", "Must be http(s).")
    try:
        webhook_addresses(url)
    except WebhookTargetRefused as exc:
        raise invalid("url", str(exc), "Not a public address.") from exc
    try:
        with transaction.atomic():
            webhook = EscalationWebhook.objects.create(
                url=url, secret=secret, created_by=user.get_username()
            )
            audit_record(
                actor=user,
                action="webhook.create",
                target=f"webhook:{webhook.pk}",
                details={"url": url},
            )
            return webhook
    except IntegrityError as exc:
        if "webhook_url_unique" not in str(exc):
            raise
        raise invalid(
            "url", "This URL has a webhook already: each escalation is posted once.", "Taken."
        ) from exc


def _webhook_locked(webhook_id: int) -> EscalationWebhook:
    webhook = EscalationWebhook.objects.select_for_update().filter(pk=webhook_id).first()
    if webhook is None:
        raise ApplicationError("not_found", "There is no such webhook.", status_code=404)
    return webhook


def escalation_webhook_set_active(
    *, user: AbstractBaseUser, webhook_id: int, active: bool
) -> EscalationWebhook:
    """Turn a webhook off (escalations are not posted to it) or on again; audited."""
    with transaction.atomic():
        webhook = _webhook_locked(webhook_id)
        if webhook.active != active:
            webhook.active = active
            webhook.save(update_fields=["active"])
            audit_record(
                actor=user,
                action="webhook.enable" if active else "webhook.disable",
                target=f"webhook:{webhook.pk}",
                details={"url": webhook.url},
            )
        return webhook


def escalation_webhook_delete(*, user: AbstractBaseUser, webhook_id: int) -> str:
    """Remove a webhook (its undelivered posts are dropped with it); audited. Its URL."""
    with transaction.atomic():
        webhook = _webhook_locked(webhook_id)
        url = webhook.url
        pending = WebhookDelivery.objects.filter(webhook=webhook, delivered_at__isnull=True)
        audit_record(
            actor=user,
            action="webhook.delete",
            target=f"webhook:{webhook.pk}",
            details={"url": url, "undelivered_dropped": pending.count()},
        )
        webhook.delete()
        return url


def escalation_webhook_test(*, user: AbstractBaseUser, webhook_id: int) -> WebhookDelivery:
    """Queue a signed test post to one webhook (on or off), delivered like an escalation;
    audited. The delivery shows on the page when it lands or fails."""
    from review.tasks import deliver_webhook

    with transaction.atomic():
        webhook = _webhook_locked(webhook_id)
        text = (
            f"Test from Agent Ledger, sent by {slack_escaped(user.get_username())}: "
            "escalations of review items waiting longer than the SLA are posted here."
        )
        body = json.dumps({"text": text}, ensure_ascii=False, separators=(",", ":"))
        delivery = WebhookDelivery.objects.create(
            webhook=webhook, body=body, created_at=clock.now()
        )
        audit_record(
            actor=user,
            action="webhook.test",
            target=f"webhook:{webhook.pk}",
            details={"url": webhook.url, "delivery": delivery.pk},
        )
        deliver_webhook.delay_on_commit(delivery.pk)  # type: ignore[attr-defined]
        return delivery


def _waiting_as(step: Step) -> str:
    """What a desk step waits for, in the escalation's words."""
    if step.state == StepState.AWAITING_APPROVAL:
        return "waiting for approval (nothing has run yet)"
    return "unknown (it may or may not have happened)"


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
    webhooks = list(EscalationWebhook.objects.filter(active=True))
    if not recipients and not webhooks:
        return 0  # the queue page shows a banner: nobody can be notified
    base = getattr(settings, "LEDGER_DASHBOARD_URL", settings.INTENTLEDGER_URL).rstrip("/")
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
        waited = int((now - step.intent_at).total_seconds() // 60)
        try:
            with transaction.atomic():
                Escalation.objects.create(
                    step=step, run_id=step.run_id, sent_at=now, recipients=recipients
                )
                _webhooks_notify(
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
                _webhooks_notify(
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
