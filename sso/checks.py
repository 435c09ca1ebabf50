"""Settings checks at start-up: a role map that names no group, or no way to sign in at all."""

from typing import Any

from django.core.checks import Error, Warning, register
from django.core.exceptions import ImproperlyConfigured

from sso.conf import local_login_enabled, sso_settings


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
