"""Measure single sign-on: the login round trip through a real OpenID provider, and what a
dashboard page costs a provider's user against a local one.

    SECRET_KEY=x .venv/bin/python -m bench.sso_timing [--logins 20] [--pages 200]

Starts npm's oidc-provider with node (tests/sso/provider.py installs it outside the tree), and
answers the dashboard's side in this process through Django's test client, on a database of its
own (TEST_DATABASE_NAME, default bench_sso, migrated once and kept). The round trip is the
dashboard's /sso/start/, the provider's authorization request up to its sign-in page, the
provider's answer after the sign-in form (the person's typing and click left out) and the
dashboard's /sso/callback/ (discovery, the code exchanged, the JWKS, userinfo, the user and the
audit entries written). Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any
from urllib.parse import urljoin, urlsplit


def _median_ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.1f} ms (min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logins", type=int, default=20)
    parser.add_argument("--pages", type=int, default=200)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("TEST_DATABASE_NAME", "bench_sso")
    os.environ.setdefault("PASSWORD_HASHERS", "django.contrib.auth.hashers.MD5PasswordHasher")
    import django

    django.setup()
    import httpx
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    from dashboard.roles import SUPERVISORS, groups_ensure_now
    from tests.review.factories import user_in
    from tests.sso.provider import CLIENT_ID, CLIENT_SECRET, oidc_provider

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, keepdb=True)
    groups_ensure_now()
    users = {"sam": {"groups": ["ledger-supervisors"]}}
    with oidc_provider("http://testserver/sso/callback/", users) as provider:
        settings.OIDC_ISSUER = provider.issuer
        settings.OIDC_CLIENT_ID, settings.OIDC_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
        settings.OIDC_ROLE_MAP = f"ledger-supervisors={SUPERVISORS}"
        settings.OIDC_SCOPES = "openid email profile groups"
        parts: dict[str, list[float]] = {"start": [], "authorize": [], "answer": [], "callback": []}
        sso_client: Any = None
        for _ in range(args.logins + 1):  # the first one warms every path and is left out
            timings, sso_client = one_login(Client, httpx)
            for name, took in timings.items():
                parts[name].append(took)
        totals = [sum(parts[n][i] for n in parts) for i in range(1, args.logins + 1)]
        print(f"login round trip, {args.logins} sign-ins: {_median_ms(totals)}")
        for name, values in parts.items():
            print(f"  {name:<9} {_median_ms(values[1:])}")

    local_client = Client()
    local_client.force_login(user_in(SUPERVISORS, "local-sam"))
    print(f"dashboard page (/), {args.pages} requests each, taken in turns, the provider stopped:")
    clients = {"provider user": sso_client, "local user": local_client}
    seconds: dict[str, list[float]] = {label: [] for label in clients}
    queries: dict[str, int] = {}
    for label, client in clients.items():
        assert client.get("/").status_code == 200
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as captured:
            client.get("/")
        queries[label] = len(captured)
    for _ in range(args.pages):
        for label, client in clients.items():
            started = time.perf_counter()
            response = client.get("/")
            seconds[label].append(time.perf_counter() - started)
            assert response.status_code == 200
    for label in clients:
        print(f"  {label:<13} {_median_ms(seconds[label])}, {queries[label]} queries a page")


def one_login(client_class: Any, httpx: Any) -> tuple[dict[str, float], Any]:
    client = client_class()
    timings: dict[str, float] = {}
    started = time.perf_counter()
    start = client.get("/sso/start/")
    timings["start"] = time.perf_counter() - started
    assert start.status_code == 302, start.content
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        started = time.perf_counter()
        url = start["Location"]
        response = browser.get(url)
        while response.status_code in (302, 303):
            url = urljoin(url, response.headers["location"])
            response = browser.get(url)
        timings["authorize"] = time.perf_counter() - started
        form_action = response.text.split('action="')[1].split('"')[0]
        form_url = urljoin(url, form_action)
        started = time.perf_counter()  # after the person's click: the form's POST and redirects
        response = browser.post(form_url, data={"prompt": "login", "login": "sam", "password": "x"})
        url = form_url
        while not response.headers.get("location", "").startswith("http://testserver/"):
            assert response.status_code in (302, 303), response.text[:500]
            url = urljoin(url, response.headers["location"])
            response = browser.get(url)
        timings["answer"] = time.perf_counter() - started
        callback = urlsplit(response.headers["location"])
    started = time.perf_counter()
    done = client.get(f"{callback.path}?{callback.query}")
    timings["callback"] = time.perf_counter() - started
    assert done.status_code == 302 and done["Location"] == "/", done.content[:500]
    return timings, client


if __name__ == "__main__":
    main()
