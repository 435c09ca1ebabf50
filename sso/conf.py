"""The identity provider's settings (read at each use, from django.conf.settings) and discovery.

Nothing here is called per dashboard request: the provider is asked for its discovery document
when a sign-in starts and when its callback arrives, never while a signed-in user browses.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from dashboard.roles import GROUP_PERMISSIONS
from teams.models import DEFAULT_TEAM_SLUG, SLUG_PATTERN, Role
from teams.services import GROUP_ROLE

CALLBACK_PATH = "/sso/callback/"


@dataclass(frozen=True)
class SsoSettings:
    issuer: str
    client_id: str
    client_secret: str
    roles_claim: str
    role_map: dict[str, frozenset[tuple[str, str]]]  # claim value -> (team slug, role) pairs
    provider_name: str
    scopes: str
    sign_algorithms: tuple[str, ...]
    timeout_seconds: float


@dataclass(frozen=True)
class Provider:
    """What the issuer's discovery document says (the parts a sign-in uses)."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str
    token_auth_methods: tuple[str, ...]


class ProviderUnreachable(Exception):
    """The provider's discovery document could not be read (down, wrong URL, not OpenID)."""


def role_map_parse(raw: str) -> dict[str, frozenset[tuple[str, str]]]:
    """`OIDC_ROLE_MAP`: "claim-value=team:role,…", each claim value onto (team slug, role) pairs.
    A role is `supervisor`, `admin` or `auditor` (or its dashboard group's name, `supervisors`,
    …); without `team:` it is held in `default` (`ledger-sup=supervisors` as before teams). A
    value may map to several roles (listed twice); a claim value may itself hold "=" (the last
    one splits). Whether each team exists is checked at start (sso.checks, a warning: a team
    may be created after the map is written) and at each sign-in."""
    mapping: dict[str, set[tuple[str, str]]] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        value, sep, target = item.rpartition("=")
        value, target = value.strip(), target.strip()
        if not sep or not value or not target:
            raise ImproperlyConfigured(
                f"OIDC_ROLE_MAP: {item!r} is not claim-value=team:role (comma-separated pairs)."
            )
        team, colon, role = target.rpartition(":")
        team = team.strip() if colon else DEFAULT_TEAM_SLUG
        role = str(GROUP_ROLE.get(role.strip(), role.strip()))
        if role not in Role.values:
            raise ImproperlyConfigured(
                f"OIDC_ROLE_MAP: {target!r} names no role: one of {', '.join(Role.values)}, or a "
                f"dashboard group ({', '.join(sorted(GROUP_PERMISSIONS))}), after an optional "
                "team:"
            )
        if not re.match(SLUG_PATTERN, team):
            raise ImproperlyConfigured(
                f"OIDC_ROLE_MAP: {team!r} in {item!r} is not a team slug (lower-case letters, "
                "digits and hyphens)."
            )
        mapping.setdefault(value, set()).add((team, role))
    return {value: frozenset(pairs) for value, pairs in mapping.items()}


def role_map_teams(conf: "SsoSettings") -> set[str]:
    """Every team the role map names."""
    return {team for pairs in conf.role_map.values() for team, _ in pairs}


def sso_settings() -> SsoSettings | None:
    """The provider's settings, or None when OIDC_ISSUER is unset (no single sign-on)."""
    issuer = (getattr(settings, "OIDC_ISSUER", "") or "").strip().rstrip("/")
    if not issuer:
        return None
    return SsoSettings(
        issuer=issuer,
        client_id=settings.OIDC_CLIENT_ID,
        client_secret=settings.OIDC_CLIENT_SECRET,
        roles_claim=settings.OIDC_ROLES_CLAIM or "groups",
        role_map=role_map_parse(settings.OIDC_ROLE_MAP),
        provider_name=settings.OIDC_PROVIDER_NAME or "your identity provider",
        scopes=settings.OIDC_SCOPES,
        sign_algorithms=tuple(settings.OIDC_SIGN_ALGORITHMS),
        timeout_seconds=settings.OIDC_TIMEOUT_SECONDS,
    )


def local_login_enabled() -> bool:
    return bool(getattr(settings, "LOCAL_LOGIN", True))


def discover(conf: SsoSettings) -> Provider:
    """Read `{issuer}/.well-known/openid-configuration` (an issuer with a path, as Keycloak's
    `/realms/NAME`, keeps it). The document must name the configured issuer exactly."""
    url = f"{conf.issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=conf.timeout_seconds)
        response.raise_for_status()
        doc: dict[str, Any] = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnreachable(f"{url}: {exc}") from exc
    if str(doc.get("issuer", "")).rstrip("/") != conf.issuer:
        raise ProviderUnreachable(
            f"{url} names the issuer {doc.get('issuer')!r}, not {conf.issuer!r}"
        )
    try:
        return Provider(
            issuer=str(doc["issuer"]),
            authorization_endpoint=str(doc["authorization_endpoint"]),
            token_endpoint=str(doc["token_endpoint"]),
            jwks_uri=str(doc["jwks_uri"]),
            userinfo_endpoint=str(doc.get("userinfo_endpoint") or ""),
            token_auth_methods=tuple(
                doc.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
            ),
        )
    except KeyError as exc:
        raise ProviderUnreachable(f"{url} has no {exc.args[0]}") from exc


def claim_values(claims: dict[str, Any], claim: str) -> list[str]:
    """The roles claim's values: a list or one string; a dotted name reaches into an object
    (Keycloak's `realm_access.roles`) when no claim has the dotted name itself."""
    value: Any = claims.get(claim)
    if value is None and "." in claim:
        value = claims
        for part in claim.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable):
        return [str(v) for v in value if isinstance(v, str | int)]
    return []


def mapped_roles(conf: SsoSettings, claims: dict[str, Any]) -> dict[str, set[str]]:
    """The roles the claims map to under OIDC_ROLE_MAP, by team slug (possibly none)."""
    roles: dict[str, set[str]] = {}
    for value in claim_values(claims, conf.roles_claim):
        for team, role in conf.role_map.get(value, frozenset()):
            roles.setdefault(team, set()).add(role)
    return roles


def mapped_groups(conf: SsoSettings, claims: dict[str, Any]) -> set[str]:
    """The dashboard groups standing for the roles the claims map to in `default`."""
    role_group = {role: group for group, role in GROUP_ROLE.items()}
    return {role_group[r] for r in mapped_roles(conf, claims).get(DEFAULT_TEAM_SLUG, ())}
