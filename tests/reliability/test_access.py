"""Who may call what: every worker API call and every dashboard URL, for every kind of caller.

- the worker API and the tool gateway: only a live worker token (anonymous, a revoked token, a
  malformed header and a logged-in dashboard session of any group all get 401/403 and write
  nothing);
- the dashboard and the audit pages: never a worker token (it is not a login), whatever the
  method; the URL list is read from review.urls, audit.urls and console.urls, so new pages are covered.
"""

import uuid
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from runs.tokens import worker_token_create, worker_token_revoke
from tests.reliability.helpers import snapshot
from tests.runs.journal_client import JournalClient


@pytest.fixture
def leased_run(api: APIClient) -> dict[str, Any]:
    journal = JournalClient(api)
    run = journal.create(external_id="access")
    epoch = journal.lease(run["id"]).json()["epoch"]
    assert journal.intent(run["id"], epoch, 0).status_code == 201
    return {"id": run["id"], "epoch": epoch}


def _api_calls(run_id: str, epoch: int) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("post", "/api/v1/runs/", {"agent": "support", "input": {}}),
        ("get", f"/api/v1/runs/{run_id}/", None),
        ("post", f"/api/v1/runs/{run_id}/lease", {"worker": "intruder"}),
        ("post", f"/api/v1/runs/{run_id}/heartbeat", {"epoch": epoch}),
        (
            "post",
            f"/api/v1/runs/{run_id}/steps/",
            {
                "epoch": epoch,
                "index": 1,
                "kind": "model",
                "name": "m",
                "effect": "read",
                "arguments": {},
                "outcome": {"status": "ok", "result": {}},
            },
        ),
        ("post", f"/api/v1/runs/{run_id}/steps/0/outcome", {"epoch": epoch, "result": {}}),
        ("post", f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": {}}),
        ("post", f"/api/v1/runs/{run_id}/fail", {"epoch": epoch, "error": {}}),
        ("get", f"/api/v1/runs/{run_id}/journal", None),
        ("get", "/api/v1/tools/", None),
        ("post", "/api/v1/tools/kb.search/invoke", {"arguments": {"query": "refund"}}),
        (
            "post",
            "/api/v1/tools/tickets.create/invoke",
            {"arguments": {"customer": "a@example.com", "subject": "s", "body": "b"}},
        ),
        ("get", f"/api/v1/idempotency/{run_id}:0:x:y", None),
    ]


def _client_as(who: str) -> Client:
    from tests.review.factories import user_in

    if who == "anonymous":
        return APIClient()
    if who == "revoked_token":
        token, raw = worker_token_create(name="revoked")
        worker_token_revoke(token_id=token.pk)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client
    if who == "malformed_header":
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Token not-a-bearer")
        return client
    if who == "unknown_token":
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Bearer alw_" + "x" * 43)
        return client
    client = APIClient()
    group = None if who == "superuser" else who
    user = user_in(group, f"{who}-access")
    if who == "superuser":
        user.is_superuser = user.is_staff = True
        user.save()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "who",
    [
        "anonymous",
        "revoked_token",
        "malformed_header",
        "unknown_token",
        "supervisors",
        "admins",
        "auditors",
        "superuser",
    ],
)
def test_only_a_live_worker_token_reaches_the_worker_api_and_the_gateway(
    leased_run: dict[str, Any], who: str
) -> None:
    client = _client_as(who)
    for method, path, body in _api_calls(leased_run["id"], leased_run["epoch"]):
        before = snapshot(leased_run["id"])
        if method == "get":
            response = client.get(path)
        else:
            response = client.post(
                path, body, format="json", HTTP_IDEMPOTENCY_KEY=f"access-{uuid.uuid4()}"
            )
        assert response.status_code in (401, 403), (who, method, path, response.status_code)
        error = response.json()["error"]
        assert error["code"] in ("not_authenticated", "authentication_failed", "permission_denied")
        assert snapshot(leased_run["id"]) == before, (who, path)


def test_a_live_worker_token_passes_authentication_on_every_call(
    api: APIClient, leased_run: dict[str, Any]
) -> None:
    for method, path, body in _api_calls(leased_run["id"], leased_run["epoch"]):
        if method == "get":
            response = api.get(path)
        else:
            response = api.post(
                path, body, format="json", HTTP_IDEMPOTENCY_KEY=f"access-{uuid.uuid4()}"
            )
        assert response.status_code not in (401, 403), (path, response.content[:200])


def _dashboard_urls(run_id: str) -> list[str]:
    """Every URL of the dashboard (review) and the audit pages, path parameters filled in."""
    fill = {
        "run_id": run_id,
        "job_id": str(uuid.uuid4()),
        "index": "0",
        "token_id": "1",
        "alert_id": "1",
        "tool_id": "1",
        "pk": "1",
        "webhook_id": "1",
        "incident_id": "1",
        "user_id": "1",
    }
    urls = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern):
                urls.append(route)

    resolver = get_resolver()
    for top in resolver.url_patterns:
        if isinstance(top, URLResolver) and getattr(top, "namespace", None) in (
            "review",
            "audit",
            "console",
            "sso",
        ):
            walk(top.url_patterns, str(top.pattern))
    filled = []
    for route in urls:
        path = "/" + route
        for name, value in fill.items():
            for converter in ("uuid", "int", "str", "slug"):
                path = path.replace(f"<{converter}:{name}>", value)
        assert "<" not in path, f"add a value for {path}"
        filled.append(path)
    return filled


def test_a_worker_token_cannot_read_or_write_any_dashboard_or_audit_page(
    worker_token: str, leased_run: dict[str, Any]
) -> None:
    urls = _dashboard_urls(leased_run["id"])
    assert len(urls) >= 15, urls
    client = Client(HTTP_AUTHORIZATION=f"Bearer {worker_token}")
    for path in urls:
        if path in ("/login/", "/sso/start/", "/sso/callback/"):
            continue  # the sign-in pages are public by definition (tests/sso covers them)
        for method in ("get", "post"):
            before = snapshot(leased_run["id"])
            response = getattr(client, method)(path, {"note": "x", "action": "sent"})
            assert response.status_code in (302, 401, 403, 405), (
                method,
                path,
                response.status_code,
            )
            if response.status_code == 302:
                assert response["Location"].startswith("/login/"), (path, response["Location"])
            assert snapshot(leased_run["id"]) == before, (method, path)
