"""Signing in through a real OpenID provider (npm's oidc-provider, run by node) in Chromium.

The provider's issuer has a path (/realms/agents, as Keycloak's), so the dashboard finds it only
through discovery. Its users: sam (supervisors), ada (admins and supervisors), aud (auditors),
mallory (no group the dashboard maps).
"""

import re
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from sso.models import OidcIdentity
from tests.processes import free_port
from tests.review.browser import TIMEOUT, shot
from tests.sso.conftest import PROVIDER_NAME
from tests.sso.provider import OidcProvider

pytestmark = pytest.mark.django_db(transaction=True)


def _context(browser: Any) -> Any:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(TIMEOUT)
    return context


def _at_provider(page: Any, base: str) -> None:
    page.goto(f"{base}/login/")
    assert page.locator("#sso-start").inner_text() == f"Sign in with {PROVIDER_NAME}"
    page.click("#sso-start")
    page.wait_for_selector("input[name=login]")
    assert page.url.startswith("http://localhost:")  # the provider's own sign-in page


def _submit_at_provider(page: Any, username: str) -> None:
    page.fill("input[name=login]", username)
    page.fill("input[name=password]", "whatever-the-provider-checks")
    page.click("button[type=submit]")


def sign_in(page: Any, base: str, username: str) -> None:
    """/login/, "Sign in with …", the provider's form, and back on the dashboard."""
    _at_provider(page, base)
    _submit_at_provider(page, username)
    page.wait_for_url(lambda url: url.startswith(base))


def ends_on_error(page: Any, base: str, reason: str) -> str:
    """The page says the sign-in failed, and why; the browser holds no signed-in session."""
    page.wait_for_url(lambda url: url.startswith(f"{base}/sso/"))
    box = page.locator("#sso-error")
    text = str(box.inner_text())
    assert box.get_attribute("data-reason") == reason, text
    assert_signed_out(page, base)
    return text


def assert_signed_out(page: Any, base: str) -> None:
    key = {c["name"]: c["value"] for c in page.context.cookies(base)}.get("sessionid")
    session = Session.objects.filter(session_key=key).first() if key else None
    assert session is None or "_auth_user_id" not in session.get_decoded()
    page.goto(f"{base}/")
    assert page.url.startswith(f"{base}/login/")


def nav(page: Any) -> list[str]:
    """The main menu's entries (the queue's waiting badge left off)."""
    return [
        re.sub(r"\s*\d+$", "", t.strip()) for t in page.locator("nav.nav > a").all_inner_texts()
    ]


def groups_of(username: str) -> set[str]:
    return set(User.objects.get(username=username).groups.values_list("name", flat=True))


def test_a_supervisor_an_admin_an_auditor_and_an_outsider_sign_in(browser, review_server, provider):
    base = review_server
    context = _context(browser)
    page = context.new_page()

    page.goto(f"{base}/login/")
    shot(page, "sso-login")
    sign_in(page, base, "sam")
    assert "Review queue" in nav(page) and "People" not in nav(page)
    assert "Worker tokens" not in nav(page)
    assert page.locator(".who .username").inner_text() == "sam"
    assert page.locator(".who").get_by_text("Password").count() == 0  # no password here
    page.goto(f"{base}/people/")
    assert page.locator("h1").inner_text() == "Not allowed"
    assert groups_of("sam") == {SUPERVISORS}
    context.clear_cookies()

    sign_in(page, base, "aud")
    assert "Audit log" in nav(page) and "People" not in nav(page)
    assert groups_of("aud") == {AUDITORS}
    context.clear_cookies()

    sign_in(page, base, "mallory")
    refusal = page.locator("#sso-refused")
    assert refusal.get_attribute("data-reason") == "no_role"
    assert "marketing" in refusal.inner_text()
    shot(page, "sso-refused")
    assert "Runs" not in page.content()  # no dashboard data, no menu
    assert_signed_out(page, base)
    assert not User.objects.filter(username="mallory").exists()
    context.clear_cookies()

    sign_in(page, base, "ada")
    assert {"People", "Worker tokens", "Audit log"} <= set(nav(page))
    assert groups_of("ada") == {ADMINS, SUPERVISORS}
    page.click("nav >> text=People")
    rows = page.locator("#people tbody tr")
    assert rows.count() == 3  # sam, aud, ada; mallory never became a user
    sam_row = page.locator('tr[data-user="sam"]')
    assert PROVIDER_NAME in sam_row.locator(".source").inner_text()
    assert sam_row.locator(".groups").inner_text().strip() == SUPERVISORS
    shot(page, "people")
    # the audit log has each sign-in and the refusal, with the provider and the groups
    page.goto(f"{base}/audit-log/?action=sso.")
    log = page.locator("main").inner_text()
    assert log.count("sso.login") == 3 and "sso.refused" in log
    refused = AuditEntry.objects.get(action="sso.refused")
    assert refused.details["reason"] == "no_role"
    assert refused.details["claim_values"] == ["marketing", "everyone"]
    assert refused.details["provider"] == PROVIDER_NAME
    login = AuditEntry.objects.get(action="sso.login", actor_name="ada")
    assert login.details["groups"] == [ADMINS, SUPERVISORS]
    assert login.details["issuer"] == provider.issuer
    # matched by the provider's subject
    assert OidcIdentity.objects.get(user__username="ada").sub == "ada"


def test_a_group_removed_at_the_provider_is_gone_at_the_next_sign_in(
    browser, review_server, provider: OidcProvider, settings
):
    base = review_server
    context = _context(browser)
    page = context.new_page()
    sign_in(page, base, "ada")
    assert "People" in nav(page)
    ada = User.objects.get(username="ada")

    # the signed-in session costs the provider nothing: it may even be down now
    issuer = settings.OIDC_ISSUER
    settings.OIDC_ISSUER = f"http://127.0.0.1:{free_port()}/realms/agents"
    page.goto(f"{base}/people/")
    assert page.locator("h1").inner_text() == "People"
    settings.OIDC_ISSUER = issuer

    provider.groups_set("ada", ["ledger-supervisors"])
    page.locator(".who button", has_text="Log out").click()
    context.clear_cookies()  # the provider's session too: a new sign-in there
    sign_in(page, base, "ada")
    assert "People" not in nav(page) and "Review queue" in nav(page)
    page.goto(f"{base}/people/")
    assert page.locator("h1").inner_text() == "Not allowed"
    assert groups_of("ada") == {SUPERVISORS}
    change = AuditEntry.objects.filter(action="sso.roles", actor_name="ada").latest("id")
    assert change.details["removed"] == [ADMINS] and change.details["added"] == []

    provider.groups_set("ada", [])
    context.clear_cookies()
    sign_in(page, base, "ada")
    assert page.locator("#sso-refused").get_attribute("data-reason") == "no_role"
    assert_signed_out(page, base)
    assert groups_of("ada") == set()
    assert User.objects.get(username="ada").pk == ada.pk  # the same user, by sub


def _started(page: Any, base: str) -> str:
    """A sign-in started and left at the provider's page: the state the dashboard sent there."""
    with page.expect_request(lambda r: "/realms/agents/auth?" in r.url) as authorize:
        _at_provider(page, base)
    sent = parse_qs(urlsplit(authorize.value.url).query)
    # the authorization-code flow with PKCE (S256), a state and a nonce
    assert sent["response_type"] == ["code"] and sent["code_challenge_method"] == ["S256"]
    assert len(sent["code_challenge"][0]) == 43 and len(sent["nonce"][0]) >= 32
    assert sent["redirect_uri"] == [f"{base}/sso/callback/"]
    return sent["state"][0]


def test_bad_answers_end_on_an_error_page_without_a_session(
    browser, review_server, provider: OidcProvider, settings
):
    base = review_server
    context = _context(browser)
    page = context.new_page()

    # no state at all
    page.goto(f"{base}/sso/callback/?code=abc")
    ends_on_error(page, base, "missing_state")

    # a state this browser never started (the callback URL tampered with)
    _started(page, base)
    page.goto(f"{base}/sso/callback/?code=abc&state=not-the-state-we-sent")
    ends_on_error(page, base, "unknown_state")
    context.clear_cookies()

    # a replayed code: the first answer signs sam in; the same answer again is refused (its
    # state is spent) and signs the browser out; the old code under a new sign-in's state is
    # refused by the provider
    with page.expect_request(lambda r: "/sso/callback/" in r.url) as answer:
        sign_in(page, base, "sam")
    assert page.url == f"{base}/"
    first = answer.value.url
    page.goto(first)
    ends_on_error(page, base, "unknown_state")
    context.clear_cookies()
    state = _started(page, base)
    code = parse_qs(urlsplit(first).query)["code"][0]
    page.goto(f"{base}/sso/callback/?{urlencode({'code': code, 'state': state})}")
    text = ends_on_error(page, base, "code_refused")
    assert "invalid_grant" in text
    context.clear_cookies()

    # ID tokens the provider signs for another audience, as another issuer, already expired, or
    # signed with a key that is not in its JWKS
    changes: list[tuple[dict[str, Any], str]] = [
        ({"aud": "another-application"}, "another application"),
        ({"iss": "http://localhost:1/realms/elsewhere"}, "another issuer"),
        ({"expired": True}, "expired"),
        ({"foreign_key": True}, "signature"),
    ]
    for change, words in changes:
        provider.tamper(**change)
        sign_in(page, base, "sam")
        assert words in ends_on_error(page, base, "token_rejected")
        context.clear_cookies()
    provider.tamper()

    # the provider answers with an error (the person cancels at the provider)
    _at_provider(page, base)
    page.click("text=[ Cancel ]")
    assert "access_denied" in ends_on_error(page, base, "provider_error")
    context.clear_cookies()

    # the provider is unreachable when the sign-in starts
    settings.OIDC_ISSUER = f"http://127.0.0.1:{free_port()}/realms/agents"
    page.goto(f"{base}/login/")
    page.click("#sso-start")
    page.locator("#sso-error").wait_for()
    shot(page, "sso-provider-down")
    said = ends_on_error(page, base, "provider_unreachable")
    assert "could not be reached, so the sign-in could not start" in said
    assert "tell your administrator" in said
    assert not re.search(r"HTTPConnectionPool|Max retries|Errno|urllib3|127\.0\.0\.1", said)

    reasons = [e.details["reason"] for e in AuditEntry.objects.filter(action="sso.refused")]
    assert sorted(set(reasons)) == [
        "code_refused",
        "missing_state",
        "provider_error",
        "provider_unreachable",
        "token_rejected",
        "unknown_state",
    ]
    assert AuditEntry.objects.filter(action="sso.login").count() == 1  # the first answer only
