"""Settings an admin edits on the dashboard: budget policies and approval rules, each change
audited with its fields before and after.

Lock precondition: none held by the caller. A save runs in its own transaction; making a policy
the default locks the old default (`select_for_update`) before taking its flag; a delete locks
the policy it removes. Uniqueness (a name, an agent, a rule's pattern) is the database's.
"""

from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Model

from dashboard.audit import audit_record
from runs.api_errors import ApplicationError, invalid
from runs.constants import AGENT_NAME_RULE, agent_name_valid
from runs.models import ApprovalRule, BudgetPolicy
from teams.scope import home_team_id

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


def _setting_audit(
    user: AbstractBaseUser | str,
    kind: str,
    verb: str,
    pk: Any,
    note: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None = None,
) -> None:
    """A setting's change in the audit log: `<kind>.<verb>` on `<kind>:<pk>`, its fields before
    and (unless deleted) after."""
    details = {"before": before} if verb == "delete" else {"before": before, "after": after}
    audit_record(
        actor=user, action=f"{kind}.{verb}", target=f"{kind}:{pk}", note=note, details=details
    )


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
        after = _setting_values(target, fields)
        verb = "create" if stored is None else "update"
        _setting_audit(user, kind, verb, target.pk, str(values.get("note", "")), before, after)
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


def _default_replace(
    user: AbstractBaseUser | str, policy: BudgetPolicy, *, confirmed: bool
) -> None:
    """A new default takes the flag over from the old one, whose change is audited on its own
    (`policy.update`, is_default true → false): the old default then applies to no agent. Only
    when the person said so (`confirmed`): a default is not replaced by a stray tick."""
    if not policy.is_default:
        return
    olds = list(
        BudgetPolicy.objects.select_for_update()
        .filter(is_default=True, team_id=policy.team_id)
        .exclude(pk=policy.pk)
    )
    if olds and not confirmed:
        said = (
            f"“{olds[0].name}” is the default policy now: saving makes “{policy.name}” the "
            f"default instead, and “{olds[0].name}” then applies to no agent. "
            "Tick “Replace the default” to confirm."
        )
        raise ApplicationError("confirmation_required", said, details={"replace_default": [said]})
    for old in olds:
        before = _setting_values(old, POLICY_FIELDS)
        old.is_default = False
        old.save(update_fields=["is_default", "updated_at"])
        note = f"No longer the default: “{policy.name}” is. It applies to no agent now."
        _setting_audit(
            user, "policy", "update", old.pk, note, before, _setting_values(old, POLICY_FIELDS)
        )


def budget_policy_save(
    *, user: AbstractBaseUser | str, policy: BudgetPolicy | None, values: dict[str, Any]
) -> BudgetPolicy:
    """Create or edit a policy; making it the default moves the default flag onto it (the old
    default's change is an audit entry of its own), once `values["replace_default"]` confirms it.

    Running runs keep the limits they copied; this only affects runs created afterwards.
    """

    def check(target: BudgetPolicy) -> None:
        _policy_check(target)
        _default_replace(user, target, confirmed=bool(values.get("replace_default")))

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
        blank=BudgetPolicy(team_id=home_team_id()),  # type: ignore[misc]  # a new one: in the team the person works in
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
        _setting_audit(user, "policy", "delete", policy_id, note, values)
        return str(values["name"])


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
