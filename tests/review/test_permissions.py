"""Each group × each action, checked server-side: a hidden button is not a permission.

Allowed actions succeed and write their audit entry; refused ones answer 403 and change nothing.
Anonymous users are sent to the login page. Every state change refuses a request without CSRF.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from runs.constants import StepState
from runs.models import BudgetPolicy, Run, Step, WorkerToken
from runs.tokens import worker_token_create
from tests.database import shared_rows
from tests.review.factories import UnknownStep, killed_support_run, user_in

BROWSE = {SUPERVISORS, ADMINS, AUDITORS}
RESOLVE = {SUPERVISORS, ADMINS}
ADMIN_ONLY = {ADMINS}


@dataclass
class Action:
    name: str
    method: str
    url: Callable[[UnknownStep, dict[str, Any]], str]
    allowed: set[str]
    data: Callable[[UnknownStep, dict[str, Any]], dict[str, Any]] = lambda u, ctx: {}
    audit_action: str | None = None  # the audit entry an allowed POST writes


def _item(u: UnknownStep) -> str:
    return f"/queue/{u.run_id}/{u.index}"


ACTIONS = [
    Action("runs list", "get", lambda u, c: "/", BROWSE),
    Action("transcript", "get", lambda u, c: f"/runs/{u.run_id}/", BROWSE),
    Action("verify chain", "get", lambda u, c: f"/runs/{u.run_id}/verify", BROWSE),
    Action("review queue", "get", lambda u, c: "/queue/", BROWSE),
    Action("queue count", "get", lambda u, c: "/queue/count", BROWSE),
    Action("review item", "get", lambda u, c: _item(u) + "/", BROWSE),
    Action("audit log", "get", lambda u, c: "/audit-log/", BROWSE),
    Action(
        "resolve sent",
        "post",
        lambda u, c: _item(u) + "/resolve",
        RESOLVE,
        lambda u, c: {"action": "sent", "note": "seen in the mail log"},
        "step.resolve.sent",
    ),
    Action(
        "resolve retry",
        "post",
        lambda u, c: _item(u) + "/resolve",
        RESOLVE,
        lambda u, c: {"action": "retry", "note": "not in the mail log", "confirm_repeat": "on"},
        "step.resolve.retry",
    ),
    Action(
        "resolve abandon",
        "post",
        lambda u, c: _item(u) + "/resolve",
        RESOLVE,
        lambda u, c: {"action": "abandon", "note": "customer withdrew"},
        "step.resolve.abandon",
    ),
    Action("claim", "post", lambda u, c: _item(u) + "/claim", RESOLVE, audit_action="step.claim"),
    Action(
        "decide (resume a run in review)",
        "post",
        lambda u, c: f"/runs/{u.run_id}/decide",
        RESOLVE,
        lambda u, c: {"action": "abandon", "note": "crash loop"},
    ),
    Action(
        "raise limits",
        "post",
        lambda u, c: f"/runs/{u.run_id}/limits",
        ADMIN_ONLY,
        lambda u, c: {"steps": "500", "note": "long ticket"},
        "run.limits.raise",
    ),
    Action("policies list", "get", lambda u, c: "/policies/", ADMIN_ONLY),
    Action("policy form", "get", lambda u, c: "/policies/new", ADMIN_ONLY),
    Action(
        "policy create",
        "post",
        lambda u, c: "/policies/new",
        ADMIN_ONLY,
        lambda u, c: {
            "name": "billing",
            "agent": "billing",
            "max_steps": "30",
            "max_tokens": "1000",
            "max_wall_seconds": "600",
            "max_recoveries": "2",
        },
        "policy.create",
    ),
    Action(
        "policy edit",
        "post",
        lambda u, c: f"/policies/{c['policy'].pk}/",
        ADMIN_ONLY,
        lambda u, c: {
            "name": c["policy"].name,
            "agent": "support",
            "max_steps": "99",
            "max_tokens": "1000",
            "max_wall_seconds": "600",
            "max_recoveries": "2",
        },
        "policy.update",
    ),
    Action("tokens list", "get", lambda u, c: "/tokens/", ADMIN_ONLY),
    Action(
        "token create",
        "post",
        lambda u, c: "/tokens/",
        ADMIN_ONLY,
        lambda u, c: {"name": "pod-7"},
        "token.create",
    ),
    Action(
        "token revoke",
        "post",
        lambda u, c: f"/tokens/{c['token'].pk}/revoke",
        ADMIN_ONLY,
        lambda u, c: {"confirm": "yes"},
        "token.revoke",
    ),
]

GROUPS = [SUPERVISORS, ADMINS, AUDITORS, None]


def _story() -> tuple[UnknownStep, dict[str, Any]]:
    item = killed_support_run()
    policy = BudgetPolicy.objects.create(
        name="support-policy",
        agent="support",
        max_steps=20,
        max_tokens=1000,
        max_wall_seconds=600,
        max_recoveries=2,
    )
    token, _ = worker_token_create(name="pod-1")
    return item, {"policy": policy, "token": token}


@pytest.fixture(scope="module")
def story(django_db_setup: Any, django_db_blocker: Any) -> Iterator[tuple[UnknownStep, dict]]:
    """The killed run, a policy and a token, built once for the module's hundred-odd tests;
    what a test changes goes with its own transaction (tests/database.py, shared_rows)."""
    with shared_rows(django_db_blocker, _story) as built:
        yield built


@pytest.fixture
def unknown_step(story: tuple[UnknownStep, dict], db: Any) -> UnknownStep:
    return story[0]


@pytest.fixture
def ctx(story: tuple[UnknownStep, dict[str, Any]], db: Any) -> dict[str, Any]:
    return story[1]


def _snapshot(u: UnknownStep) -> tuple[Any, ...]:
    step = Step.objects.get(run_id=u.run_id, index=u.index)
    run = Run.objects.get(pk=u.run_id)
    return (
        step.state,
        step.resolution_action,
        step.claimed_by_id,
        run.status,
        run.limit_steps,
        run.event_seq,
        BudgetPolicy.objects.count(),
        tuple(BudgetPolicy.objects.order_by("pk").values_list("max_steps", flat=True)),
        WorkerToken.objects.count(),
        WorkerToken.objects.filter(revoked_at__isnull=False).count(),
        # a refused attempt is itself audited (access.refused); nothing else may appear
        AuditEntry.objects.exclude(action="access.refused").count(),
    )


@pytest.mark.django_db
@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g or "no-group")
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.name)
def test_each_group_may_do_exactly_what_its_role_allows(
    group: str | None, action: Action, unknown_step: UnknownStep, ctx: dict[str, Any]
) -> None:
    client = Client()
    client.force_login(user_in(group))
    url = action.url(unknown_step, ctx)
    before = _snapshot(unknown_step)
    response = getattr(client, action.method)(url, action.data(unknown_step, ctx))
    if group in action.allowed:
        assert response.status_code in (200, 302), (url, response.status_code)
        if action.audit_action:
            entry = AuditEntry.objects.get(action=action.audit_action)
            assert entry.actor_name == f"{group}-user"
        if action.method == "post":
            assert _snapshot(unknown_step) != before
    else:
        assert response.status_code == 403, (url, response.status_code)
        assert _snapshot(unknown_step) == before
        refused = AuditEntry.objects.get(action="access.refused")
        assert refused.target == url


@pytest.mark.django_db
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.name)
def test_anonymous_visitors_are_sent_to_the_login_page(
    action: Action, unknown_step: UnknownStep, ctx: dict[str, Any]
) -> None:
    before = _snapshot(unknown_step)
    url = action.url(unknown_step, ctx)
    response = getattr(Client(), action.method)(url, action.data(unknown_step, ctx))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")
    assert _snapshot(unknown_step) == before


POSTS = [a for a in ACTIONS if a.method == "post"]


@pytest.mark.django_db
@pytest.mark.parametrize("action", POSTS, ids=lambda a: a.name)
def test_every_state_change_refuses_a_request_without_csrf_token(
    action: Action, unknown_step: UnknownStep, ctx: dict[str, Any]
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user_in(ADMINS))
    before = _snapshot(unknown_step)
    response = client.post(action.url(unknown_step, ctx), action.data(unknown_step, ctx))
    assert response.status_code == 403
    assert _snapshot(unknown_step) == before
    assert Step.objects.get(run_id=unknown_step.run_id, index=2).state == StepState.UNKNOWN


@pytest.mark.django_db
def test_csrf_token_from_the_page_is_accepted(unknown_step: UnknownStep) -> None:
    """The control case for the CSRF test: the same post with the page's token goes through."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user_in(SUPERVISORS))
    page = client.get(f"/queue/{unknown_step.run_id}/2/")
    token = page.context["csrf_token"]
    response = client.post(
        f"/queue/{unknown_step.run_id}/2/resolve",
        {"action": "sent", "note": "checked", "csrfmiddlewaretoken": str(token)},
    )
    assert response.status_code == 302
    assert Step.objects.get(run_id=unknown_step.run_id, index=2).state == StepState.DONE
