"""The page a refused form post shows (CSRF_FAILURE_VIEW): what to set, not Django's generic 403.

The usual cause on a new deployment is plain HTTP with secure cookies on (SECURE_COOKIES, the
default): the browser keeps the CSRF and session cookies for HTTPS only, so the sign-in form
comes back without them. The second is an address the ledger does not know as its own (behind
a proxy that changes the Host header): CSRF_TRUSTED_ORIGINS. The page names the setting; it
shows no value of any setting.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import REASON_NO_CSRF_COOKIE
from django.shortcuts import render


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    plain_http_with_secure_cookies = settings.CSRF_COOKIE_SECURE and not request.is_secure()
    no_cookie = reason == REASON_NO_CSRF_COOKIE
    origin_unknown = reason.startswith("Origin checking failed")
    return render(
        request,
        "csrf_failure.html",
        {
            "plain_http": plain_http_with_secure_cookies and no_cookie,
            "origin_unknown": origin_unknown,
            "origin": request.META.get("HTTP_ORIGIN", ""),
        },
        status=403,
    )
