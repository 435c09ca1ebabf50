"""Single sign-on fixtures: the dashboard's live server, a real OpenID provider beside it."""

from collections.abc import Iterator
from typing import Any

import pytest

from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from tests.review.browser import review_server  # noqa: F401  (fixtures)
from tests.review.factories import groups_ready
from tests.sso.provider import CLIENT_ID, CLIENT_SECRET, OidcProvider, oidc_provider

# the provider's users and their groups there; OIDC_ROLE_MAP maps three of those groups
USERS: dict[str, dict[str, Any]] = {
    "sam": {"groups": ["ledger-supervisors", "everyone"]},
    "ada": {"groups": ["ledger-admins", "ledger-supervisors"]},
    "aud": {"groups": ["ledger-auditors"]},
    "mallory": {"groups": ["marketing", "everyone"]},
}
ROLE_MAP = f"ledger-supervisors={SUPERVISORS},ledger-admins={ADMINS},ledger-auditors={AUDITORS}"
PROVIDER_NAME = "Acme Keycloak"


@pytest.fixture
def groups(db: Any) -> None:
    groups_ready()


@pytest.fixture(scope="module")
def provider_process(review_server: str) -> Iterator[OidcProvider]:  # noqa: F811
    with oidc_provider(f"{review_server}/sso/callback/", USERS) as provider:
        yield provider


@pytest.fixture
def provider(provider_process: OidcProvider, settings: Any, groups: None) -> OidcProvider:
    """The dashboard configured for the provider (as the OIDC_* environment would), the
    provider's users back to their groups, its tokens untampered."""
    settings.OIDC_ISSUER = provider_process.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_ROLES_CLAIM = "groups"
    settings.OIDC_ROLE_MAP = ROLE_MAP
    settings.OIDC_PROVIDER_NAME = PROVIDER_NAME
    settings.OIDC_SCOPES = "openid email profile groups"
    provider_process.tamper()
    for name, user in USERS.items():
        provider_process.groups_set(name, user["groups"])
    return provider_process
