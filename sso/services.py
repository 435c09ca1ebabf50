"""Sign-ins through the identity provider and the people page's changes, each with its audit entry.

A provider user is matched by (issuer, sub) and created at the first sign-in that maps to a
dashboard group. At every sign-in the user's groups become exactly the groups the roles claim maps
to (OIDC_ROLE_MAP); a sign-in that maps to none is refused, and the refusal (with the groups it
took away, if any) is committed before the view says so. Local users are the people page's:
created there with a password, their groups set there; anyone can be deactivated there, which
ends their sessions.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import password_validation
from django.contrib.auth.models import Group, User
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from review.audit import audit_record
from review.roles import GROUP_PERMISSIONS
from runs.api_errors import ApplicationError
from sso.conf import SsoSettings, claim_values, mapped_groups
from sso.models import OidcIdentity
from teams.models import default_team
from teams.services import GROUP_ROLE, roles_set_in

AUDIT_CLAIM_VALUES = 50  # an Entra user may carry hundreds of group ids; the entry keeps these


@dataclass
class SignIn:
    user: User
    groups: list[str]
    created: bool = False
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)


class SsoRefused(Exception):
    """The provider vouched for the person, but the dashboard does not let them in."""

    def __init__(self, reason: str, message: str, *, claim_values: list[str]) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.claim_values = claim_values


def _display_name(claims: dict[str, Any]) -> str:
    for key in ("preferred_username", "email", "name", "sub"):
        value = str(claims.get(key) or "").strip()
        if value:
            return value[:150]
    return "unknown"


def _username_for(claims: dict[str, Any]) -> str:
    """A free username from the claims (preferred_username, e-mail, sub), "-2"… when taken."""
    base = re.sub(r"[^\w.@+-]", "-", _display_name(claims))[:140] or "sso-user"
    name, n = base, 1
    while User.objects.filter(username=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _details(
    conf: SsoSettings, issuer: str, claims: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        "provider": conf.provider_name,
        "issuer": issuer,
        "sub": str(claims.get("sub") or ""),
        "claim": conf.roles_claim,
        "claim_values": claim_values(claims, conf.roles_claim)[:AUDIT_CLAIM_VALUES],
        **extra,
    }


def _groups_set(user: User, names: set[str]) -> tuple[list[str], list[str]]:
    """The user's groups become exactly `names`; (added, removed)."""
    before = set(user.groups.values_list("name", flat=True))
    if before != names:
        user.groups.set(Group.objects.filter(name__in=names))
    # a group stands for its role in `default` (the roles a person holds per team: teams/)
    roles_set_in(user, default_team(), {GROUP_ROLE[n] for n in names if n in GROUP_ROLE})
    return sorted(names - before), sorted(before - names)


def _groups_audited(
    user: User, names: set[str], *, actor: User, action: str, **details: Any
) -> tuple[list[str], list[str]]:
    """`_groups_set`, and a change audited as `action`: `details`, the groups, what was added
    and what was removed (nothing changed, nothing audited). (added, removed)."""
    added, removed = _groups_set(user, names)
    if added or removed:
        audit_record(
            actor=actor,
            action=action,
            target=f"user:{user.pk}",
            details={**details, "groups": sorted(names), "added": added, "removed": removed},
        )
    return added, removed


def sso_sign_in(*, conf: SsoSettings, issuer: str, claims: dict[str, Any]) -> SignIn:
    """The provider vouched for `claims` (a verified ID token, with userinfo): the dashboard user
    they are, with exactly the mapped groups. Raises SsoRefused (already audited) when the claims
    map to no group or the user was deactivated here."""
    sub = str(claims.get("sub") or "")
    values = claim_values(claims, conf.roles_claim)
    groups = mapped_groups(conf, claims)
    who = _display_name(claims)
    refusal: SsoRefused | None = None
    result: SignIn | None = None
    with transaction.atomic():
        identity = (
            OidcIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, sub=sub)
            .first()
        )
        user: User | None = identity.user if identity else None
        if identity is None and groups:
            user = User(username=_username_for(claims))
            user.set_unusable_password()
            user.save()
            identity = OidcIdentity.objects.create(user=user, issuer=issuer, sub=sub)
        if user is not None and identity is not None and not user.is_active:
            refusal = SsoRefused(
                "deactivated",
                "An admin deactivated this account on the people page.",
                claim_values=values,
            )
        elif user is not None and identity is not None:
            created = identity.last_login_at is None
            added, removed = _groups_audited(
                user, groups, actor=user, action="sso.roles", **_details(conf, issuer, claims)
            )
            user.email = str(claims.get("email") or user.email)[:254]
            user.first_name = str(claims.get("given_name") or user.first_name)[:150]
            user.last_name = str(claims.get("family_name") or user.last_name)[:150]
            user.is_staff = user.is_superuser = False  # the provider grants dashboard groups only
            user.save()
            identity.last_login_at = timezone.now()
            identity.last_claim_values = values[:AUDIT_CLAIM_VALUES]
            identity.save(update_fields=["last_login_at", "last_claim_values"])
            result = SignIn(user, sorted(groups), created, removed, added)
        if groups and refusal is None and result is not None:
            audit_record(
                actor=result.user,
                action="sso.login",
                target=f"user:{result.user.pk}",
                details=_details(
                    conf, issuer, claims, groups=result.groups, created=result.created
                ),
            )
        else:
            refusal = refusal or SsoRefused(
                "no_role",
                "None of your groups at the identity provider gives access to this dashboard.",
                claim_values=values,
            )
            audit_record(
                actor=user or f"{who} (not a user here)",
                action="sso.refused",
                target=f"user:{user.pk}" if user else f"sub:{sub}"[:300],
                note=refusal.message,
                details=_details(conf, issuer, claims, reason=refusal.reason),
            )
    if refusal is not None:
        raise refusal
    assert result is not None
    return result


def sso_failure_record(
    *, provider: str, reason: str, message: str, ip: str, detail: str = ""
) -> None:
    """A sign-in that failed before the provider vouched for anyone (state, code, token);
    `detail`: what the library said (for whoever finds out why), kept when there is one."""
    details = {"provider": provider, "reason": reason, "ip": ip}
    audit_record(
        actor="anonymous",
        action="sso.refused",
        target="sso:callback",
        note=message,
        details={**details, "detail": detail[:500]} if detail else details,
    )


# --- people --------------------------------------------------------------------------------------


def _dashboard_groups(names: list[str]) -> set[str]:
    unknown = set(names) - set(GROUP_PERMISSIONS)
    if unknown:
        raise ApplicationError(
            "validation_error", f"No such group: {', '.join(sorted(unknown))}.", status_code=400
        )
    return set(names)


def _person(user_id: int) -> User:
    user = User.objects.select_for_update().filter(pk=user_id).first()
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
        _groups_set(user, names)
        audit_record(
            actor=actor,
            action="people.create",
            target=f"user:{user.pk}",
            details={"username": user.username, "groups": sorted(names), "source": "local"},
        )
    return user


def people_groups_set(*, actor: User, user_id: int, groups: list[str]) -> User:
    """A local user's groups (a provider user's come from the provider at each sign-in)."""
    names = _dashboard_groups(groups)
    with transaction.atomic():
        user = _person(user_id)
        if is_provider_user(user):
            raise ApplicationError(
                "provider_user",
                f"{user.username}'s groups come from the identity provider at each sign-in; "
                "change them there.",
            )
        _groups_audited(user, names, actor=actor, action="people.groups", username=user.username)
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
