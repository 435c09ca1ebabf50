"""Teams and roles: create a team, grant and revoke a person's role in one. Every change is one
transaction with its audit entry (filed in the team it concerns)."""

from typing import Any

from django.db import transaction

from dashboard.audit import audit_record
from runs.default_policy import seed_default_policy
from runs.models import BudgetPolicy
from teams.models import Membership, Role, Team
from teams.scope import every_team, team_scope

# the dashboard's groups (dashboard.roles) and the role each stands for in a team
GROUP_ROLE: dict[str, str] = {
    "supervisors": Role.SUPERVISOR,
    "admins": Role.ADMIN,
    "auditors": Role.AUDITOR,
}


def roles_set_in(user: Any, team: Team | int, roles: Any) -> tuple[list[str], list[str]]:
    """`user`'s roles in `team` become exactly `roles`; (granted, revoked). The caller audits
    (the people page's group change, a provider's sign-in)."""
    team_id = team if isinstance(team, int) else team.pk
    wanted = set(roles)
    with team_scope(team_id):
        held = set(
            Membership.objects.filter(user_id=user.pk, team_id=team_id).values_list(
                "role", flat=True
            )
        )
        for role in sorted(wanted - held):
            Membership.objects.create(user_id=user.pk, team_id=team_id, role=role)
        if held - wanted:
            Membership.objects.filter(
                user_id=user.pk, team_id=team_id, role__in=held - wanted
            ).delete()
    _forget_roles(user)
    return sorted(wanted - held), sorted(held - wanted)


def team_for_slug(slug: str) -> Team:
    """The team named `slug`; Team.DoesNotExist otherwise (teams_team is not row-secured: a
    team's name is not its data)."""
    return Team.objects.get(slug=slug)


@transaction.atomic
def team_create(*, slug: str, name: str = "", actor: Any = "system") -> Team:
    """A new team with its default budget policy (the limits of runs.default_policy), so its
    first token can start runs at once; audited in the new team."""
    team = Team(slug=slug, name=name or slug)
    team.full_clean()
    team.save()
    with team_scope(team.pk):
        seed_default_policy(BudgetPolicy, team_id=team.pk)
        audit_record(
            actor=actor,
            action="team.create",
            target=f"team:{team.slug}",
            details={"slug": team.slug, "name": team.name},
            team=team.pk,
        )
    return team


@transaction.atomic
def grant_role(user: Any, team: Team | int, role: str, *, actor: Any = "system") -> Membership:
    """`user` holds `role` in `team` (idempotent: granting it again changes nothing and writes no
    entry)."""
    if role not in Role.values:
        raise ValueError(f"unknown role {role!r}: one of {Role.values}")
    team_id = team if isinstance(team, int) else team.pk
    with team_scope(team_id):
        membership, created = Membership.objects.get_or_create(
            user_id=user.pk, team_id=team_id, role=role
        )
        if created:
            audit_record(
                actor=actor,
                action="team.role_grant",
                target=f"user:{user.pk}",
                details={"username": user.get_username(), "team": team_id, "role": role},
                team=team_id,
            )
    _forget_roles(user)
    return membership


@transaction.atomic
def revoke_role(user: Any, team: Team | int, role: str, *, actor: Any = "system") -> bool:
    """`user` no longer holds `role` in `team`; answers whether they held it."""
    team_id = team if isinstance(team, int) else team.pk
    with team_scope(team_id):
        deleted, _ = Membership.objects.filter(user_id=user.pk, team_id=team_id, role=role).delete()
        if deleted:
            audit_record(
                actor=actor,
                action="team.role_revoke",
                target=f"user:{user.pk}",
                details={"username": user.get_username(), "team": team_id, "role": role},
                team=team_id,
            )
    _forget_roles(user)
    return bool(deleted)


def roles_of(user: Any) -> dict[int, frozenset[str]]:
    """Every role `user` holds, by team id (read in every team: the person's own memberships,
    whatever the current scope; the `sign-in` use of teams.scope)."""
    if not getattr(user, "is_authenticated", False) or user.pk is None:
        return {}
    cached = getattr(user, "_team_roles", None)
    if cached is not None:
        return dict(cached)
    roles: dict[int, set[str]] = {}
    with every_team("sign-in"):
        for team_id, role in Membership.objects.filter(user_id=user.pk).values_list(
            "team_id", "role"
        ):
            roles.setdefault(team_id, set()).add(role)
    frozen = {team: frozenset(r) for team, r in roles.items()}
    user._team_roles = frozen
    return dict(frozen)


def group_names_of(user: Any) -> frozenset[str]:
    """The dashboard groups (dashboard.roles) standing for the roles `user` holds, in any team."""
    role_group = {role: group for group, role in GROUP_ROLE.items()}
    return frozenset(role_group[r] for held in roles_of(user).values() for r in held)


def resolvers_in(team_id: int | None = None) -> Any:
    """Active people who may decide review items (a role granting review.resolve) in `team_id`,
    or in any team the scope sees."""
    from django.contrib.auth import get_user_model

    from dashboard.roles import GROUP_PERMISSIONS

    roles = [GROUP_ROLE[g] for g, perms in GROUP_PERMISSIONS.items() if "resolve" in perms]
    # one filter() call: the role and the team of the same membership
    held: dict[str, Any] = {"team_roles__role__in": roles}
    if team_id is not None:
        held["team_roles__team_id"] = team_id
    return get_user_model()._default_manager.filter(is_active=True, **held).distinct()


def _forget_roles(user: Any) -> None:
    for attr in ("_team_roles", "_perm_cache", "_group_perm_cache", "_user_perm_cache"):
        if hasattr(user, attr):
            delattr(user, attr)


@transaction.atomic
def team_queue_settings_set(
    *, team: Team, review_sla_minutes: int | None, escalation_email: str, actor: Any
) -> Team:
    """A team's queue settings (its admin's, on the team settings page): the SLA before an item
    is escalated (None: REVIEW_SLA_SECONDS) and the address escalations go to ("": the team's
    supervisors); audited in the team with what it was."""
    locked = Team.objects.select_for_update().get(pk=team.pk)
    before = {
        "review_sla_minutes": locked.review_sla_minutes,
        "escalation_email": locked.escalation_email,
    }
    locked.review_sla_minutes = review_sla_minutes
    locked.escalation_email = escalation_email.strip()
    locked.full_clean()
    locked.save(update_fields=["review_sla_minutes", "escalation_email"])
    after = {
        "review_sla_minutes": locked.review_sla_minutes,
        "escalation_email": locked.escalation_email,
    }
    if after != before:
        with team_scope(locked.pk):
            audit_record(
                actor=actor,
                action="team.settings",
                target=f"team:{locked.slug}",
                details={"before": before, "after": after},
                team=locked.pk,
            )
    return locked


@transaction.atomic
def team_rename(team: Team, name: str, *, actor: Any = "system") -> Team:
    """`team` shown as `name` (its slug, which tokens and commands name, stays); audited in the
    team. Renaming it to the name it has changes nothing and writes no entry."""
    if team.name == name:
        return team
    before, team.name = team.name, name
    team.full_clean()
    team.save(update_fields=["name"])
    with team_scope(team.pk):
        audit_record(
            actor=actor,
            action="team.rename",
            target=f"team:{team.slug}",
            details={"slug": team.slug, "name": name, "before": before},
            team=team.pk,
        )
    return team
