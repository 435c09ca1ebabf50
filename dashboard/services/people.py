"""The people page's changes, each with its audit entry: local (password) users created there,
their groups set there, anyone deactivated there (which ends their sessions) or let in again;
and the same entries for what Django's admin changes (dashboard/admin.py). A provider user's
groups come from the identity provider at each sign-in (sso.services.sso_sign_in, which sets
them through `user_groups_audited`).

Lock precondition: none held by the caller; each change locks the person's row
(`select_for_update`) in its own transaction.
"""

from typing import Any

from django.contrib.auth import password_validation
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from dashboard.audit import audit_record
from dashboard.roles import GROUP_PERMISSIONS
from runs.api_errors import ApplicationError
from sso.models import OidcIdentity
from teams.models import default_team
from teams.services import GROUP_ROLE, roles_of, roles_set_in


def user_groups_set(user: User, names: set[str]) -> tuple[list[str], list[str]]:
    """The user's groups become exactly `names`; (added, removed)."""
    before = set(user.groups.values_list("name", flat=True))
    if before != names:
        user.groups.set(Group.objects.filter(name__in=names))
    # a group stands for its role in `default` (the roles a person holds per team: teams/)
    roles_set_in(user, default_team(), {GROUP_ROLE[n] for n in names if n in GROUP_ROLE})
    return sorted(names - before), sorted(before - names)


def user_groups_audited(
    user: User, names: set[str], *, actor: User, action: str, **details: Any
) -> tuple[list[str], list[str]]:
    """`user_groups_set`, and a change audited as `action`: `details`, the groups, what was added
    and what was removed (nothing changed, nothing audited). (added, removed)."""
    added, removed = user_groups_set(user, names)
    if added or removed:
        audit_record(
            actor=actor,
            action=action,
            target=f"user:{user.pk}",
            details={**details, "groups": sorted(names), "added": added, "removed": removed},
        )
    return added, removed


def _dashboard_groups(names: list[str]) -> set[str]:
    unknown = set(names) - set(GROUP_PERMISSIONS)
    if unknown:
        raise ApplicationError(
            "validation_error", f"No such group: {', '.join(sorted(unknown))}.", status_code=400
        )
    return set(names)


def people_in_sight() -> Any:
    """The people the current scope sees (teams.scope): everyone under every team (an org
    admin); otherwise everyone but those whose roles are all in teams it does not see
    (teams_membership is row-secured), so a team's admin neither lists nor changes a person of
    other teams only, who answers as one that does not exist. A person of no team (a new
    account, an org admin) stays in sight."""
    from teams.models import Membership
    from teams.scope import current, every_team

    people = User.objects.all()
    if current().every:
        return people
    seen = set(Membership.objects.values_list("user_id", flat=True).distinct())
    with every_team("people"):
        in_teams = set(Membership.objects.values_list("user_id", flat=True).distinct())
    return people.exclude(pk__in=in_teams - seen)


def _person(user_id: int) -> User:
    user = people_in_sight().select_for_update().filter(pk=user_id).first()
    if user is None:
        raise ApplicationError("not_found", "No such user.", status_code=404)
    return user


def is_provider_user(user: User) -> bool:
    return OidcIdentity.objects.filter(user=user).exists()


def people_local_create(
    *, actor: User, username: str, email: str, password: str, groups: list[str]
) -> User:
    """A local (password) account, for break-glass or a team without a provider."""
    names = _dashboard_groups(groups)
    username = username.strip()
    with transaction.atomic():
        if User.objects.filter(username__iexact=username).exists():
            raise ApplicationError("conflict", f"The username {username!r} is taken.")
        user = User(username=username, email=email.strip())
        try:
            password_validation.validate_password(password, user)
        except ValidationError as exc:
            raise ApplicationError(
                "validation_error", " ".join(exc.messages), status_code=400
            ) from exc
        user.set_password(password)
        user.save()
        user_groups_set(user, names)
        audit_record(
            actor=actor,
            action="people.create",
            target=f"user:{user.pk}",
            details={"username": user.username, "groups": sorted(names), "source": "local"},
        )
    return user


def _local_person(user_id: int, what: str) -> User:
    """The person `user_id`, refused when their `what` (groups, roles) come from the identity
    provider: a provider user's are set at each sign-in."""
    user = _person(user_id)
    if is_provider_user(user):
        raise ApplicationError(
            "provider_user",
            f"{user.username}'s {what} come from the identity provider at each sign-in; "
            "change them there.",
        )
    return user


def people_groups_set(*, actor: User, user_id: int, groups: list[str]) -> User:
    """A local user's groups (a provider user's come from the provider at each sign-in)."""
    names = _dashboard_groups(groups)
    with transaction.atomic():
        user = _local_person(user_id, "groups")
        user_groups_audited(
            user, names, actor=actor, action="people.groups", username=user.username
        )
    return user


def people_admin_saved(*, actor: Any, user: User, created: bool, changed: list[str]) -> None:
    """A person added or changed in Django's admin: the entry the people page would write, with
    what the admin changed (never the password itself). Call it inside the admin's transaction."""
    audit_record(
        actor=actor,
        action="people.create" if created else "people.change",
        target=f"user:{user.pk}",
        details={
            "username": user.username,
            "groups": sorted(user.groups.values_list("name", flat=True)),
            "superuser": user.is_superuser,
            "active": user.is_active,
            "changed": sorted(changed),
            "source": "django-admin",
        },
    )


def people_admin_password_set(*, actor: Any, user_id: int) -> None:
    """A password set in Django's admin for someone (the password itself is never kept)."""
    user = _person(user_id)
    audit_record(
        actor=actor,
        action="people.password",
        target=f"user:{user.pk}",
        details={"username": user.username, "source": "django-admin"},
    )


def people_admin_deleted(*, actor: Any, users: list[User]) -> None:
    """People deleted in Django's admin (before the rows go, so their names are kept)."""
    for user in users:
        audit_record(
            actor=actor,
            action="people.delete",
            target=f"user:{user.pk}",
            details={"username": user.username, "source": "django-admin"},
        )


def user_sessions_end(user: User) -> int:
    """Delete every unexpired session of `user`; how many there were."""
    ended = 0
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        if str(session.get_decoded().get("_auth_user_id")) == str(user.pk):
            session.delete()
            ended += 1
    return ended


def people_deactivate(*, actor: User, user_id: int) -> tuple[User, int]:
    """`user` can no longer sign in (password or provider) and their sessions end now."""
    with transaction.atomic():
        user = _person(user_id)
        if user.pk == actor.pk:
            raise ApplicationError("conflict", "You cannot deactivate yourself.")
        if not user.is_active:
            raise ApplicationError("conflict", f"{user.username} is already deactivated.")
        user.is_active = False
        user.save(update_fields=["is_active"])
        ended = user_sessions_end(user)
        audit_record(
            actor=actor,
            action="people.deactivate",
            target=f"user:{user.pk}",
            details={"username": user.username, "sessions_ended": ended},
        )
    return user, ended


def people_reactivate(*, actor: User, user_id: int) -> User:
    with transaction.atomic():
        user = _person(user_id)
        if user.is_active:
            raise ApplicationError("conflict", f"{user.username} is active.")
        user.is_active = True
        user.save(update_fields=["is_active"])
        audit_record(
            actor=actor,
            action="people.reactivate",
            target=f"user:{user.pk}",
            details={"username": user.username},
        )
    return user


def people_role_change(*, actor: User, user_id: int, team: Any, role: str, grant: bool) -> bool:
    """Grant or revoke `user`'s `role` in `team` (teams.services audits it in the team); a
    provider user's roles come from the provider at each sign-in. Answers whether it changed."""
    from teams.models import Role
    from teams.services import grant_role, revoke_role

    if role not in Role.values:
        raise ApplicationError("validation_error", f"No such role: {role}.", status_code=400)
    with transaction.atomic():
        user = _local_person(user_id, "roles")
        if grant:
            before = role in roles_of(user).get(getattr(team, "pk", team), ())
            grant_role(user, team, role, actor=actor)
            return not before
        return revoke_role(user, team, role, actor=actor)
