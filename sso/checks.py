"""Settings checks at start-up: a role map that names no group, or no way to sign in at all."""

from typing import Any

from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError

from sso.conf import local_login_enabled, role_map_teams, sso_settings


@register()
def sso_settings_check(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    try:
        conf = sso_settings()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="sso.E001")]
    problems: list[Any] = []
    if conf is not None:
        if not conf.client_id or not conf.client_secret:
            problems.append(
                Error(
                    "OIDC_ISSUER is set without OIDC_CLIENT_ID and OIDC_CLIENT_SECRET.",
                    id="sso.E002",
                )
            )
        wrong = [a for a in conf.sign_algorithms if not a.startswith(("RS", "ES"))]
        if wrong or not conf.sign_algorithms:
            problems.append(
                Error(
                    f"OIDC_SIGN_ALGORITHMS: {', '.join(wrong) or 'none'}; only RS* and ES* "
                    "(the signature is checked against the provider's JWKS).",
                    id="sso.E004",
                )
            )
        if not conf.role_map:
            problems.append(
                Warning(
                    "OIDC_ROLE_MAP is empty: every single sign-on is refused (no group to map to).",
                    id="sso.W001",
                )
            )
    elif not local_login_enabled():
        problems.append(
            Error("LOCAL_LOGIN=0 without OIDC_ISSUER: nobody could sign in.", id="sso.E003")
        )
    return problems


@register(Tags.database)
def sso_role_map_teams_check(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """A team the role map names that does not exist (yet): a warning, not an error, since an
    operator may write the map before `create_team`; until it exists, a sign-in grants nothing
    there (its entry names it). Runs with `check --database default`, and before `migrate`."""
    try:
        conf = sso_settings()
    except ImproperlyConfigured:
        return []  # sso_settings_check says it
    if conf is None:
        return []
    from teams.models import Team

    try:
        known = set(Team.objects.values_list("slug", flat=True))
    except DatabaseError:
        return []  # no tables yet (before the first migrate)
    missing = sorted(role_map_teams(conf) - known)
    if not missing:
        return []
    return [
        Warning(
            f"OIDC_ROLE_MAP names teams that do not exist: {', '.join(missing)}. Sign-ins grant "
            "no role there until they are created (manage.py create_team SLUG).",
            id="sso.W002",
        )
    ]
