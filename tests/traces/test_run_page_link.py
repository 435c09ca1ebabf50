"""OTEL_TRACE_URL puts a link from a run's page to its trace in the company's viewer."""

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.roles import SUPERVISORS
from runs.services.creation import run_create
from tests.review.factories import groups_ready, user_in
from tests.traces.story import CALLER_SPAN, CALLER_TRACE
from traces.context import TraceParent, derived_trace_id


@pytest.fixture
def supervisor(db: Any) -> Client:
    groups_ready()
    client = Client()
    client.force_login(user_in(SUPERVISORS))
    return client


def test_the_run_page_links_to_the_callers_trace(supervisor: Client, settings: Any) -> None:
    settings.OTEL_TRACE_URL = "https://phoenix.example/projects/agent-ledger/traces/{trace_id}"
    joined, _ = run_create(
        agent="support",
        input={},
        actor="test",
        trace_parent=TraceParent(trace_id=CALLER_TRACE, span_id=CALLER_SPAN),
    )
    alone, _ = run_create(agent="support", input={}, actor="test")

    page = supervisor.get(reverse("review:run", args=[joined.pk])).content.decode()
    other = supervisor.get(reverse("review:run", args=[alone.pk])).content.decode()

    assert f'href="https://phoenix.example/projects/agent-ledger/traces/{CALLER_TRACE}"' in page
    own = f"{derived_trace_id(alone.pk):032x}"
    assert f'href="https://phoenix.example/projects/agent-ledger/traces/{own}"' in other


def test_without_a_trace_url_the_run_page_has_no_trace_link(
    supervisor: Client, settings: Any
) -> None:
    settings.OTEL_TRACE_URL = ""
    run, _ = run_create(agent="support", input={}, actor="test")

    page = supervisor.get(reverse("review:run", args=[run.pk])).content.decode()

    assert "<dt>Trace</dt>" not in page
