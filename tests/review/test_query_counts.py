"""No N+1: every page issues the same number of queries for 5 rows as for 50."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dashboard.audit import audit_record
from dashboard.roles import ADMINS
from runs import clock
from runs.models import BudgetPolicy, Run
from runs.services.creation import run_create
from runs.services.enforcement import run_lease_expire
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record, step_outcome_record
from runs.tokens import worker_token_create
from tests.review.factories import user_in


def _policy(agent: str) -> None:
    BudgetPolicy.objects.get_or_create(
        agent=agent,
        defaults={
            "name": agent,
            "max_steps": 500,
            "max_tokens": 10**9,
            "max_wall_seconds": 3600,
            "max_recoveries": 5,
        },
    )


def _run_with_steps(n: int, *, agent: str, unknown: bool) -> Run:
    """n write steps: done (ledger-enforced), or left open as nobody-enforced and recovered to unknown."""
    _policy(agent)
    run, _ = run_create(agent=agent, input={}, actor="worker:w")
    grant = run_lease_acquire(run_id=run.pk, worker="w", ttl_seconds=5, actor="worker:w")
    for i in range(n):
        step_intent_record(
            run_id=run.pk,
            epoch=grant.epoch,
            index=i,
            kind="tool",
            name="email.send",
            effect="write",
            enforced_by="nobody" if unknown else "ledger",
            arguments={"to": f"c{i}@example.com", "subject": "s", "body": "b"},
            actor="worker:w",
        )
        if not unknown:
            step_outcome_record(
                run_id=run.pk,
                index=i,
                epoch=grant.epoch,
                status="ok",
                result={"email": {"id": i}},
                usage={"input_tokens": 1, "output_tokens": 1},
                actor="worker:w",
            )
    if unknown:
        later = clock.now() + timedelta(seconds=6)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(clock, "now", lambda: later)
            run_lease_expire(run_id=run.pk)
    return run


def _runs(n: int) -> str:
    for i in range(n):
        run_create(agent=f"agent-{i % 3}", input={}, external_id=f"ext-{n}-{i}", actor="w")
    _run_with_steps(2, agent="mixed", unknown=True)
    return "/"


def _transcript(n: int) -> str:
    return f"/runs/{_run_with_steps(n, agent=f'tx{n}', unknown=False).pk}/"


def _queue(n: int) -> str:
    _run_with_steps(n, agent=f"q{n}", unknown=True)
    return "/queue/"


def _item(n: int) -> str:
    run = _run_with_steps(n, agent=f"i{n}", unknown=True)
    return f"/queue/{run.pk}/{n - 1}/"


def _audit(n: int) -> str:
    for i in range(n):
        audit_record(actor="system", action="x.test", target=f"t{i}", details={"i": i})
    return "/audit-log/"


def _policies(n: int) -> str:
    for i in range(n):
        _policy(f"p{n}-{i}")
    return "/policies/"


def _tokens(n: int) -> str:
    for i in range(n):
        worker_token_create(name=f"pod-{n}-{i}")
    return "/tokens/"


PAGES: dict[str, Callable[[int], str]] = {
    "runs list": _runs,
    "transcript": _transcript,
    "review queue": _queue,
    "review item": _item,
    "audit log": _audit,
    "policies": _policies,
    "tokens": _tokens,
}


def _count(client: Client, url: str, **headers: Any) -> int:
    client.get(url, **headers)  # warm caches that are per process, not per row
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **headers)
    assert response.status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.django_db
@pytest.mark.parametrize("page", list(PAGES), ids=list(PAGES))
def test_page_query_count_does_not_grow_with_rows(page: str, groups: None) -> None:
    client = Client()
    client.force_login(user_in(ADMINS))
    small = _count(client, PAGES[page](5))
    large = _count(client, PAGES[page](50))
    assert small == large, f"{page}: {small} queries for 5 rows, {large} for 50"


@pytest.mark.django_db
def test_live_partials_query_count_does_not_grow_with_rows(groups: None) -> None:
    client = Client()
    client.force_login(user_in(ADMINS))
    counts = []
    for n in (5, 50):
        run = _run_with_steps(n, agent=f"live{n}", unknown=False)
        counts.append(_count(client, f"/runs/{run.pk}/?part=live", HTTP_HX_REQUEST="true"))
    assert counts[0] == counts[1]
