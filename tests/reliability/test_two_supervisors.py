"""Two supervisors resolve the same "maybe sent" step at the same instant: one decision, ever.

At the service level (two threads, two database connections, review_step_resolve) and over HTTP
(two logged-in sessions posting the dashboard's resolve form to a live web server). Whatever the
interleaving: exactly one resolution, one `step_resolved` event, one audit entry, and the other
supervisor is told who already decided.
"""

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client

from runs.api_errors import ApplicationError
from runs.models import Event, Step
from tests.reliability.conftest import SERVER_CONNECTIONS, web_server
from tests.reliability.helpers import all_at_once

pytestmark = pytest.mark.pg_connections(SERVER_CONNECTIONS)  # the web server it starts

ROUNDS = 8


def _unknown_steps(count: int) -> list[Any]:
    from tests.review.factories import killed_support_run

    return [
        killed_support_run(external_id=f"two-sup-{secrets.token_hex(4)}", customer=f"c{i}@x.io")
        for i in range(count)
    ]


def _supervisors() -> tuple[User, User]:
    from tests.review.factories import user_in

    return user_in("supervisors", "sup-alice"), user_in("supervisors", "sup-bob")


def _assert_one_decision(item: Any, names: set[str]) -> str:
    from dashboard.audit import AuditEntry

    step = Step.objects.get(run_id=item.run_id, index=item.index)
    assert step.resolution_action in ("sent", "abandon")
    assert step.resolution_by in names
    assert Event.objects.filter(run_id=item.run_id, type="step_resolved").count() == 1
    assert (
        AuditEntry.objects.filter(
            action__startswith="step.resolve", target__contains=str(item.run_id)
        ).count()
        == 1
    )
    return str(step.resolution_by)


def test_two_supervisors_resolving_at_once_through_the_service_make_one_decision(
    transactional_db: Any,
) -> None:
    from review.services.resolutions import review_step_resolve

    alice, bob = _supervisors()
    for item in _unknown_steps(ROUNDS):

        def resolve(i: int, item: Any = item) -> str:
            from django.db import connection

            user, action = [(alice, "sent"), (bob, "abandon")][i]
            try:
                review_step_resolve(
                    user=user,
                    run_id=item.run_id,
                    index=item.index,
                    action=action,
                    note=f"{user.username} checked the mail log",
                )
                return "won"
            except ApplicationError as exc:
                return f"{exc.code}: {exc.message}"
            finally:
                connection.close()

        outcomes = all_at_once(2, resolve)
        assert outcomes.count("won") == 1, outcomes
        winner = _assert_one_decision(item, {"sup-alice", "sup-bob"})
        loser = next(o for o in outcomes if o != "won")
        assert loser.startswith("already_resolved"), loser
        assert winner in loser


@pytest.fixture
def dashboard_url(transactional_db: Any) -> Iterator[str]:
    """A live web server whose cookies work over plain HTTP (SECURE_COOKIES=0, as behind TLS)."""
    with web_server(env={"SECURE_COOKIES": "0"}) as url:
        yield url


def _session_for(user: User, base_url: str) -> httpx.Client:
    client = Client()
    client.force_login(user)
    csrf = secrets.token_hex(16)  # an unmasked CSRF secret: the cookie and the header match
    return httpx.Client(
        base_url=base_url,
        cookies={"sessionid": client.cookies["sessionid"].value, "csrftoken": csrf},
        headers={"X-CSRFToken": csrf},
        timeout=30,
        follow_redirects=True,  # no htmx: the form posts, redirects, and shows the message
    )


def test_two_supervisors_posting_the_resolve_form_at_once_make_one_decision(
    dashboard_url: str,
) -> None:
    alice, bob = _supervisors()
    sessions = [_session_for(alice, dashboard_url), _session_for(bob, dashboard_url)]
    try:
        for item in _unknown_steps(ROUNDS):
            path = f"/queue/{item.run_id}/{item.index}/resolve"

            def post(i: int, path: str = path) -> httpx.Response:
                action = ["sent", "abandon"][i]
                return sessions[i].post(
                    path, data={"action": action, "note": f"checked by {i}", "result": ""}
                )

            responses = all_at_once(2, post)
            assert all(r.status_code in (200, 302) for r in responses), [
                (r.status_code, r.text[:300]) for r in responses
            ]
            winner = _assert_one_decision(item, {"sup-alice", "sup-bob"})
            loser = responses[1] if winner == "sup-alice" else responses[0]
            assert "already resolved" in loser.text, loser.text[:2000]
            assert winner in loser.text
    finally:
        for session in sessions:
            session.close()
