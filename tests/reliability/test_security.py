"""Deployment hardening: check --deploy, security headers, CSP without inline scripts, cookies,
and brute-force login throttling."""

import base64
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from tests.reliability.conftest import ROOT

PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "ledger.example.com",
    "SECURE_SSL_REDIRECT": "1",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "SECURE_HSTS_PRELOAD": "1",
    "SECURE_PROXY_SSL_HEADER": "1",
    # what a deployment names for itself (config/deployment.py warns of each one missing)
    "AUDIT_SIGNING_KEY": base64.b64encode(os.urandom(32)).decode(),
    "EMAIL_HOST": "mail.example.com",
    "LEDGER_DASHBOARD_URL": "https://ledger.example.com",
}


def test_check_deploy_is_clean_with_production_settings() -> None:
    # a production process: no test-session switches (the browser tests relax Django's async guard)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SECURE_COOKIES", "DJANGO_ALLOW_ASYNC_UNSAFE", "DEBUG")
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**env, **PRODUCTION_ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout + result.stderr


def test_check_deploy_flags_a_weak_secret_key() -> None:
    """The check is live, not silenced: a short key is still reported."""
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**os.environ, **PRODUCTION_ENV, "SECRET_KEY": "short"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "security.W009" in result.stdout + result.stderr


def _csp(response: Any) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy", "")
    assert header, "no Content-Security-Policy header"
    policy: dict[str, list[str]] = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            policy[words[0]] = words[1:]
    return policy


@pytest.mark.parametrize("path", ["/login/", "/api/v1/runs/", "/api/v1/schema/", "/"])
def test_every_response_carries_the_security_headers(db: Any, path: str) -> None:
    response = Client().get(path)
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"
    policy = _csp(response)
    scripts = policy.get("script-src") or policy["default-src"]
    assert "'unsafe-inline'" not in scripts
    assert "'unsafe-eval'" not in scripts
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["object-src"] == ["'none'"]
    assert "'unsafe-inline'" not in policy.get("style-src", [])


TEMPLATE_DIRS = [ROOT / "templates", *sorted(ROOT.glob("*/templates"))]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
EVENT_HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)
JS_URL = re.compile(r"javascript:", re.IGNORECASE)


def _templates() -> list[Path]:
    return [p for d in TEMPLATE_DIRS for p in sorted(d.rglob("*.html"))]


def test_no_template_has_inline_scripts_event_handlers_or_javascript_urls() -> None:
    """CSP refuses inline script: a template that relies on one would silently break."""
    offenders = []
    for template in _templates():
        text = template.read_text()
        for pattern in (INLINE_SCRIPT, EVENT_HANDLER, JS_URL):
            for match in pattern.finditer(text):
                if "nonce=" in match.group(0):
                    continue  # a nonce'd inline script is allowed by the policy
                offenders.append(f"{template.relative_to(ROOT)}: {match.group(0)!r}")
    assert _templates(), "no templates found"
    assert not offenders, offenders


def test_session_and_csrf_cookies_are_secure_and_httponly_when_not_debugging(db: Any) -> None:
    from tests.review.factories import PASSWORD, user_in

    assert not settings.DEBUG
    user_in("supervisors", "cookie-user")
    client = Client()
    client.get("/login/")
    response = client.post("/login/", {"username": "cookie-user", "password": PASSWORD})
    assert response.status_code == 302, response.content[:300]
    session = response.cookies[settings.SESSION_COOKIE_NAME]
    assert session["secure"] and session["httponly"]
    assert session["samesite"].lower() in ("lax", "strict")
    csrf = client.cookies[settings.CSRF_COOKIE_NAME]
    assert csrf["secure"]


# --- brute-force login throttling (review.LoginView) ---------------------------------------


@pytest.fixture
def throttled_user(db: Any) -> str:
    from tests.review.factories import user_in

    user_in("supervisors", "victim")
    return "victim"


def _login(client: Client, username: str, password: str) -> int:
    return client.post("/login/", {"username": username, "password": password}).status_code


def test_repeated_wrong_passwords_lock_the_account_even_for_the_right_password(
    throttled_user: str,
) -> None:
    from tests.review.factories import PASSWORD

    client = Client()
    attempts = [_login(client, throttled_user, f"guess-{i}") for i in range(settings_max())]
    assert all(status == 200 for status in attempts)  # the form again, with an error
    assert _login(client, throttled_user, PASSWORD) == 429
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("variant", ["VICTIM", "victim ", " victim", "\tvictim\n", "ｖｉｃｔｉｍ"])
def test_the_lockout_is_not_bypassed_by_case_whitespace_or_unicode_variants(
    throttled_user: str, variant: str
) -> None:
    """Django's login form strips and NFKC-normalises the username; the lockout must too."""
    from tests.review.factories import PASSWORD

    client = Client()
    for i in range(settings_max()):
        _login(client, throttled_user, f"guess-{i}")
    assert _login(client, variant, PASSWORD) == 429, f"{variant!r} got past the lockout"
    assert "_auth_user_id" not in client.session


def settings_max() -> int:
    from dashboard.services.logins import login_max_failures

    return login_max_failures()
