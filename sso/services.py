"""Sign-ins through the identity provider, each with its audit entry.

A provider user is matched by (issuer, sub) and created at the first sign-in that maps to a
dashboard group. At every sign-in the user's groups become exactly the groups the roles claim maps
to (OIDC_ROLE_MAP), and their roles in each team exactly the roles it maps to there (a value
without a team means `default`, whose roles the groups stand for); a sign-in that maps to none is
refused, and the refusal (with the groups it
took away, if any) is committed before the view says so. The people page's changes (local users,
their groups, deactivation) are dashboard.services.people's.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from dashboard.audit import audit_record
from dashboard.services.people import user_groups_audited
from sso.conf import SsoSettings, claim_values, mapped_groups, mapped_roles
from sso.models import OidcIdentity
from teams.models import DEFAULT_TEAM_SLUG, Team
from teams.scope import team_scope
from teams.services import roles_of, roles_set_in

AUDIT_CLAIM_VALUES = 50  # an Entra user may carry hundreds of group ids; the entry keeps these


@dataclass
class SignIn:
    user: User
    groups: list[str]
    created: bool = False
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    # the roles held in teams other than `default` after the sign-in: slug -> roles
    team_roles: dict[str, list[str]] = field(default_factory=dict)


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


def sso_sign_in(*, conf: SsoSettings, issuer: str, claims: dict[str, Any]) -> SignIn:
    """The provider vouched for `claims` (a verified ID token, with userinfo): the dashboard user
    they are, with exactly the mapped groups. Raises SsoRefused (already audited) when the claims
    map to no group or the user was deactivated here."""
    sub = str(claims.get("sub") or "")
    values = claim_values(claims, conf.roles_claim)
    groups = mapped_groups(conf, claims)
    by_team = mapped_roles(conf, claims)
    teams = {t.slug: t for t in Team.objects.filter(slug__in=by_team)}
    unknown = sorted(set(by_team) - set(teams))
    has_role = bool(groups) or any(by_team[slug] for slug in teams if slug != DEFAULT_TEAM_SLUG)
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
        if identity is None and has_role:
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
            added, removed = user_groups_audited(
                user, groups, actor=user, action="sso.roles", **_details(conf, issuer, claims)
            )
            team_roles = _team_roles_set(user, by_team, teams, conf, issuer, claims)
            user.email = str(claims.get("email") or user.email)[:254]
            user.first_name = str(claims.get("given_name") or user.first_name)[:150]
            user.last_name = str(claims.get("family_name") or user.last_name)[:150]
            user.is_staff = user.is_superuser = False  # the provider grants dashboard groups only
            user.save()
            identity.last_login_at = timezone.now()
            identity.last_claim_values = values[:AUDIT_CLAIM_VALUES]
            identity.save(update_fields=["last_login_at", "last_claim_values"])
            result = SignIn(user, sorted(groups), created, removed, added, team_roles)
        if has_role and refusal is None and result is not None:
            audit_record(
                actor=result.user,
                action="sso.login",
                target=f"user:{result.user.pk}",
                details=_details(
                    conf,
                    issuer,
                    claims,
                    groups=result.groups,
                    team_roles=result.team_roles,
                    created=result.created,
                    **({"unknown_teams": unknown} if unknown else {}),
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


def _team_roles_set(
    user: User,
    by_team: dict[str, set[str]],
    teams: dict[str, Team],
    conf: SsoSettings,
    issuer: str,
    claims: dict[str, Any],
) -> dict[str, list[str]]:
    """The user's roles in every team but `default` (whose roles the groups set) become exactly
    the mapped ones: granted where mapped, revoked where held and no longer mapped; each team's
    change audited in that team (`sso.roles`). A mapped team that does not exist is skipped
    (named in the sign-in's entry). The roles now held, by slug."""
    held = roles_of(user)
    others = {t.pk: t for t in Team.objects.filter(pk__in=held)}
    wanted = {t.pk: t for slug, t in teams.items() if slug != DEFAULT_TEAM_SLUG}
    now: dict[str, list[str]] = {}
    for team_id, team in sorted({**others, **wanted}.items()):
        if team.slug == DEFAULT_TEAM_SLUG:
            continue
        roles = by_team.get(team.slug, set())
        added, removed = roles_set_in(user, team, roles)
        if added or removed:
            with team_scope(team_id):
                audit_record(
                    actor=user,
                    action="sso.roles",
                    target=f"user:{user.pk}",
                    team=team_id,
                    details={
                        **_details(conf, issuer, claims),
                        "team": team.slug,
                        "roles": sorted(roles),
                        "added": added,
                        "removed": removed,
                    },
                )
        if roles:
            now[team.slug] = sorted(roles)
    return now
