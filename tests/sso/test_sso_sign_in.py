"""What a sign-in the provider vouched for does here: the user (by issuer and sub), their groups,
the audit entries; and the settings that say which claim values map to which group."""

import html
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from sso.conf import SsoSettings, claim_values, role_map_parse
from sso.models import OidcIdentity
from sso.services import SsoRefused, sso_sign_in
from tests.review.factories import PASSWORD, user_in

ISSUER = "https://login.example.com/realms/support"


def conf(**overrides: Any) -> SsoSettings:
    values: dict[str, Any] = {
        "issuer": ISSUER,
        "client_id": "agent-ledger",
        "client_secret": "s3cret",
        "roles_claim": "groups",
        "role_map": role_map_parse(
            f"ledger-sup={SUPERVISORS},ledger-admins={ADMINS},ledger-admins={SUPERVISORS},"
            f"ledger-audit={AUDITORS}"
        ),
        "provider_name": "Example SSO",
        "scopes": "openid email profile",
        "sign_algorithms": ("RS256",),
        "timeout_seconds": 5.0,
    }
    return SsoSettings(**(values | overrides))


def claims(sub: str, *groups: str, **extra: Any) -> dict[str, Any]:
    return {"sub": sub, "preferred_username": sub, "groups": list(groups), **extra}


def groups_of(user: User) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def test_the_role_map_reads_pairs_and_refuses_what_is_not_a_role():
    # a group's name, or a role, without a team: held in `default` (as before teams)
    assert role_map_parse("a=supervisors, b=admins,b=auditor ,") == {
        "a": frozenset({("default", "supervisor")}),
        "b": frozenset({("default", "admin"), ("default", "auditor")}),
    }
    # Entra ids and Keycloak paths as claim values; a value may hold "="
    assert role_map_parse("/ledger/admins=admins,x=y=auditors") == {
        "/ledger/admins": frozenset({("default", "admin")}),
        "x=y": frozenset({("default", "auditor")}),
    }
    # a team named before the role
    assert role_map_parse("ledger-billing-sup=billing:supervisor,ops=billing:admins") == {
        "ledger-billing-sup": frozenset({("billing", "supervisor")}),
        "ops": frozenset({("billing", "admin")}),
    }
    with pytest.raises(ImproperlyConfigured, match="superusers"):
        role_map_parse("ops=superusers")
    with pytest.raises(ImproperlyConfigured, match="claim-value=team:role"):
        role_map_parse("supervisors")
    with pytest.raises(ImproperlyConfigured, match="not a team slug"):
        role_map_parse("ops=Billing Team:admin")


def test_the_roles_claim_may_be_one_string_or_reach_into_an_object():
    assert claim_values({"groups": "ops"}, "groups") == ["ops"]
    keycloak = {"realm_access": {"roles": ["ledger-admins", "offline_access"]}}
    assert claim_values(keycloak, "realm_access.roles") == ["ledger-admins", "offline_access"]
    assert claim_values({}, "groups") == []


@pytest.mark.django_db
def test_the_first_sign_in_creates_the_user_with_exactly_the_mapped_groups(groups):
    done = sso_sign_in(
        conf=conf(), issuer=ISSUER, claims=claims("u-81", "ledger-admins", "everyone")
    )
    user = done.user
    assert done.created and user.username == "u-81"
    assert groups_of(user) == {ADMINS, SUPERVISORS}
    assert not user.has_usable_password()  # no password sign-in for a provider's user
    assert OidcIdentity.objects.get(user=user).sub == "u-81"
    entries = {e.action: e for e in AuditEntry.objects.filter(actor_name="u-81")}
    assert entries["sso.roles"].details["added"] == [ADMINS, SUPERVISORS]
    assert entries["sso.login"].details["groups"] == [ADMINS, SUPERVISORS]
    assert entries["sso.login"].details["provider"] == "Example SSO"
    assert entries["sso.login"].details["issuer"] == ISSUER


@pytest.mark.django_db
def test_users_are_matched_by_the_providers_subject_not_by_email_or_username(groups):
    local_sam = user_in(ADMINS, "sam", email="sam@example.com")
    # someone at the provider calling themselves "sam" with sam's address is not local sam
    first = sso_sign_in(
        conf=conf(),
        issuer=ISSUER,
        claims=claims("s-1", "ledger-sup", email="sam@example.com", preferred_username="sam"),
    ).user
    assert first.pk != local_sam.pk and first.username == "sam-2"
    assert groups_of(local_sam) == {ADMINS}  # untouched
    # the same subject with a new address is the same user; another subject is another user
    again = sso_sign_in(
        conf=conf(), issuer=ISSUER, claims=claims("s-1", "ledger-sup", email="new@example.com")
    ).user
    assert again.pk == first.pk and again.email == "new@example.com"
    other = sso_sign_in(
        conf=conf(), issuer=ISSUER, claims=claims("s-2", "ledger-sup", email="new@example.com")
    ).user
    assert other.pk != first.pk
    # the same sub from another issuer is someone else too
    elsewhere = sso_sign_in(
        conf=conf(), issuer="https://other.example.com", claims=claims("s-1", "ledger-sup")
    ).user
    assert elsewhere.pk != first.pk


@pytest.mark.django_db
def test_a_group_taken_away_at_the_provider_goes_and_no_group_at_all_is_refused(groups):
    user = sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("u-5", "ledger-admins")).user
    user.is_staff = True
    user.save()
    sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("u-5", "ledger-audit"))
    user.refresh_from_db()
    assert groups_of(user) == {AUDITORS} and not user.is_staff
    change = AuditEntry.objects.filter(action="sso.roles").latest("id")
    assert change.details["removed"] == [ADMINS, SUPERVISORS]
    assert change.details["added"] == [AUDITORS]

    with pytest.raises(SsoRefused) as refused:
        sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("u-5", "marketing"))
    assert refused.value.reason == "no_role"
    assert groups_of(user) == set()  # committed with the refusal, not rolled back
    entry = AuditEntry.objects.get(action="sso.refused")
    assert entry.actor_name == "u-5" and entry.details["claim_values"] == ["marketing"]


@pytest.mark.django_db
def test_someone_with_no_mapped_group_never_becomes_a_user(groups):
    with pytest.raises(SsoRefused):
        sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("x-1", "marketing"))
    assert not User.objects.filter(username="x-1").exists()
    assert AuditEntry.objects.get(action="sso.refused").target == "sub:x-1"


@pytest.mark.django_db
def test_a_deactivated_provider_user_is_refused_even_with_groups(groups):
    user = sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("u-9", "ledger-sup")).user
    User.objects.filter(pk=user.pk).update(is_active=False)
    with pytest.raises(SsoRefused) as refused:
        sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("u-9", "ledger-sup"))
    assert refused.value.reason == "deactivated"
    assert not User.objects.get(pk=user.pk).is_active


@pytest.mark.django_db
def test_a_provider_users_page_costs_what_a_local_users_does(groups):
    """The session of a provider's user is an ordinary one: no token check, no provider call."""
    sso_user = sso_sign_in(conf=conf(), issuer=ISSUER, claims=claims("u-3", "ledger-sup")).user
    local_user = user_in(SUPERVISORS, "local-sup")
    counts = []
    for user in (sso_user, local_user):
        client = Client()
        client.force_login(user)
        client.get("/")  # warm
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


@pytest.mark.django_db
def test_the_login_page_offers_the_provider_as_a_link_not_a_form(groups, settings):
    settings.OIDC_ISSUER = ISSUER
    settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = "agent-ledger", "s3cret"
    settings.OIDC_PROVIDER_NAME = "Example SSO"
    page = Client().get("/login/?next=/queue/").content.decode()
    # a link (GET): the CSP's form-action 'self' would block a form's redirect to the provider
    assert '<a class="button primary" id="sso-start" href="/sso/start/?next=/queue/">' in page
    assert "Sign in with Example SSO" in page
    assert 'name="password"' in page  # password sign-in stays beside it


@pytest.mark.django_db
def test_without_a_provider_there_is_no_sign_in_link_and_no_callback(groups, settings):
    settings.OIDC_ISSUER = ""
    assert b"sso-start" not in Client().get("/login/").content
    assert Client().get("/sso/start/").status_code == 404
    assert Client().get("/sso/callback/?code=a&state=b").status_code == 404


@pytest.mark.django_db
def test_local_login_off_hides_and_refuses_password_sign_in_the_admins_too(groups, settings):
    settings.OIDC_ISSUER = ISSUER
    settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = "agent-ledger", "s3cret"
    settings.LOCAL_LOGIN = False
    user_in(ADMINS, "root-ish")
    client = Client()
    page = client.get("/login/").content.decode()
    assert 'name="password"' not in page and "sso-start" in page
    response = client.post("/login/", {"username": "root-ish", "password": PASSWORD})
    assert response.status_code == 403
    assert b"Password sign-in is turned off" in response.content
    assert "_auth_user_id" not in client.session
    # the Django admin's login is the same page (its POST is not read; the page has no form)
    response = client.post(
        "/django-admin/login/", {"username": "root-ish", "password": PASSWORD}, follow=True
    )
    assert response.redirect_chain[0][0].startswith("/login/?next=")
    assert 'name="password"' not in response.content.decode()
    assert "_auth_user_id" not in client.session
    settings.LOCAL_LOGIN = True
    assert client.post("/login/", {"username": "root-ish", "password": PASSWORD}).status_code == 302


@pytest.mark.django_db
def test_a_callback_without_state_or_with_an_error_leaves_no_session(groups, settings):
    settings.OIDC_ISSUER = ISSUER
    settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = "agent-ledger", "s3cret"
    client = Client()
    client.force_login(user_in(SUPERVISORS, "signed-in-already"))
    response = client.get("/sso/callback/?code=abc")
    assert response.status_code == 400 and b"carries no state" in response.content
    assert client.get("/").status_code == 302  # signed out
    response = client.get("/sso/callback/?error=access_denied&error_description=No+thanks&state=x")
    assert response.status_code == 400 and b"access_denied (No thanks)" in response.content
    assert [e.details["reason"] for e in AuditEntry.objects.order_by("id")] == [
        "missing_state",
        "provider_error",
    ]


@pytest.mark.django_db
def test_an_unreachable_provider_is_said_in_words_and_the_detail_goes_to_the_log(
    groups, settings, caplog
):
    from tests.processes import free_port

    port = free_port()
    settings.OIDC_ISSUER = f"http://127.0.0.1:{port}/realms/x"
    settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = "agent-ledger", "s3cret"
    with caplog.at_level("WARNING", logger="sso"):
        response = Client().get("/sso/start/")
    assert response.status_code == 502
    said = re.search(r'<p role="alert">(.*?)</p>', response.content.decode(), re.S)
    assert said is not None
    sentence = html.unescape(said.group(1))
    assert sentence[0].isupper()
    assert "could not be reached, so the sign-in could not start." in sentence
    assert "tell your administrator" in sentence
    for raw in ("HTTPConnectionPool", "Max retries", "Errno", "urllib3", str(port)):
        assert raw not in response.content.decode(), raw
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "could not be reached" in logged and str(port) in logged  # the detail, for admins
    entry = AuditEntry.objects.get(action="sso.refused")
    assert str(port) in entry.details["detail"]


def test_the_start_up_check_refuses_settings_nobody_could_sign_in_with(settings):
    from sso.checks import sso_settings_check

    settings.OIDC_ISSUER, settings.LOCAL_LOGIN = "", False
    assert [p.id for p in sso_settings_check()] == ["sso.E003"]
    settings.OIDC_ISSUER, settings.LOCAL_LOGIN = ISSUER, True
    settings.OIDC_CLIENT_ID = settings.OIDC_CLIENT_SECRET = ""
    settings.OIDC_ROLE_MAP = "ops=root"
    assert [p.id for p in sso_settings_check()] == ["sso.E001"]
    settings.OIDC_ROLE_MAP = ""
    assert [p.id for p in sso_settings_check()] == ["sso.E002", "sso.W001"]
    # a shared-secret or unsigned ID token is never checked against the JWKS
    settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = "agent-ledger", "s3cret"
    settings.OIDC_ROLE_MAP, settings.OIDC_SIGN_ALGORITHMS = "a=admins", ["RS256", "HS256"]
    assert [p.id for p in sso_settings_check()] == ["sso.E004"]
